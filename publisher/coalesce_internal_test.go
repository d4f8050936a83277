package publisher

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// pipeCoalescer returns a coalescer writing into a pipe and the pipe's reading end.
func pipeCoalescer(t *testing.T, delay time.Duration, failed func(error) error) (*coalescer, net.Conn) {
	t.Helper()
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	defer SetCoalesceDelay(delay)()
	return newCoalescer(writeBound{Conn: client, timeout: 200 * time.Millisecond}, failed), server
}

// readExactly reads want from r, failing if it does not come within a second.
func readExactly(t *testing.T, r net.Conn, want string) {
	t.Helper()
	r.SetReadDeadline(time.Now().Add(time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil || string(got) != want {
		t.Fatalf("read %q, %v; want %q", got, err, want)
	}
}

// nothingToRead fails if r has something to read within d.
func nothingToRead(t *testing.T, r net.Conn, d time.Duration) {
	t.Helper()
	r.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	if n, err := r.Read(b[:]); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %q, %v; want nothing written yet", b[:n], err)
	}
}

// Writes made while holding wait for Flush, and go out in one write; any write made while not
// holding (a heartbeat, a declaration) goes out at once, after what was held, in order.
func TestCoalescerHoldsOnlyPublishes(t *testing.T) {
	w, r := pipeCoalescer(t, time.Hour, nil)
	w.holding(true)
	for _, p := range []string{"pub1", "pub2"} {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("held Write: %d, %v", n, err)
		}
	}
	w.holding(false)
	nothingToRead(t, r, 50*time.Millisecond)

	go w.Write([]byte("beat"))
	readExactly(t, r, "pub1pub2beat")

	w.holding(true)
	w.Write([]byte("pub3"))
	w.holding(false)
	go w.Flush()
	readExactly(t, r, "pub3")
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.writes != 2 {
		t.Errorf("socket writes: %d, want 2", w.writes)
	}
}

// What is held goes out by itself once the delay has passed, or at once when the size bound is
// reached.
func TestCoalescerWritesByItself(t *testing.T) {
	w, r := pipeCoalescer(t, 20*time.Millisecond, nil)
	w.holding(true)
	w.Write([]byte("pub1"))
	readExactly(t, r, "pub1") // after the delay

	big := make([]byte, coalesceBytes)
	done := make(chan struct{})
	go func() { w.Write(big); close(done) }()
	r.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := io.ReadFull(r, big); err != nil {
		t.Fatalf("a write of the size bound is not written at once: %v", err)
	}
	<-done
}

// A held write that the broker never takes fails at the write timeout: the failure is reported
// to the session (which cuts the connection) and every later write fails too.
func TestCoalescerStuckFlushFails(t *testing.T) {
	failed := make(chan error, 1)
	w, _ := pipeCoalescer(t, time.Hour, func(err error) error { failed <- err; return err })
	w.holding(true)
	w.Write([]byte("pub1")) // nobody reads the pipe
	start := time.Now()
	err := w.Flush()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Flush into a stalled pipe: %v, want os.ErrDeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Flush failed after %v, want about the 200ms write timeout", d)
	}
	select {
	case got := <-failed:
		if !errors.Is(got, os.ErrDeadlineExceeded) {
			t.Errorf("failure reported: %v", got)
		}
	default:
		t.Error("the failure was not reported")
	}
	if _, err := w.Write([]byte("beat")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Write after a failed flush: %v, want the same failure", err)
	}
}

// Flush asked soon after a socket write leaves what is held to the timer, so that a steady flow
// of single messages becomes a write per delay; long after one, it writes at once.
func TestCoalescerFlushSoonAfterAWrite(t *testing.T) {
	w, r := pipeCoalescer(t, 100*time.Millisecond, nil)
	go w.Write([]byte("beat")) // a write, just now
	readExactly(t, r, "beat")
	w.holding(true)
	w.Write([]byte("pub1"))
	w.holding(false)
	start := time.Now()
	if err := w.flushSoon(true); err != nil {
		t.Fatal(err)
	}
	nothingToRead(t, r, 30*time.Millisecond)
	readExactly(t, r, "pub1") // by the timer
	if d := time.Since(start); d < 90*time.Millisecond {
		t.Errorf("written after %v, want after the 100ms delay", d)
	}

	time.Sleep(150 * time.Millisecond) // the last write is now older than the delay
	w.holding(true)
	w.Write([]byte("pub2"))
	w.holding(false)
	start = time.Now()
	go w.flushSoon(true)
	readExactly(t, r, "pub2")
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("written after %v, want at once", d)
	}
}
