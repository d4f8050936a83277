package publisher

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// A message written slowly but steadily is never cut, however long it takes in all; a write that
// makes no progress for the timeout fails.
func TestWriteBoundCutsOnlyWritesThatMakeNoProgress(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	w := writeBound{Conn: client, timeout: 200 * time.Millisecond}

	go func() { // a slow reader: 1 KiB every 40 ms, then it stops reading
		buf := make([]byte, 1024)
		for range 15 {
			if _, err := io.ReadFull(server, buf); err != nil {
				return
			}
			time.Sleep(40 * time.Millisecond)
		}
	}()
	start := time.Now()
	chunk := make([]byte, 1024)
	for i := range 15 {
		if _, err := w.Write(chunk); err != nil {
			t.Fatalf("write %d, %v into a slow but steady transfer: %v", i, time.Since(start), err)
		}
	}
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Fatalf("the transfer took %v; the test needs it to outlast the 200ms timeout", took)
	}

	start = time.Now()
	_, err := w.Write(chunk) // nobody reads any more
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a reader that stopped: got %v, want os.ErrDeadlineExceeded", err)
	}
	if took := time.Since(start); took < 150*time.Millisecond || took > 5*time.Second {
		t.Errorf("the stuck write failed after %v, want about 200ms", took)
	}
}
