package e2e_test

import (
	"bytes"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// With an OTLP endpoint set, walbox exports a span per publish in the trace of the row's
// traceparent (insertTx writes one into every row's headers).
func TestSpansAreExportedInTheRowsTrace(t *testing.T) {
	var (
		mu     sync.Mutex
		bodies [][]byte
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, body)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()

	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	w.startRelay("WALBOX_OTLP_ENDPOINT=" + collector.URL)
	x := w.insertTx(w.conn, 5, "order.created")
	w.drain([]txn{x}, nil, time.Minute)

	traceID, _ := hex.DecodeString("4bf92f3577b34da6a3ce929d0e0e4736")
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		found := false
		for _, b := range bodies {
			found = found || (bytes.Contains(b, traceID) && bytes.Contains(b, []byte("publish "+w.exchange)))
		}
		n := len(bodies)
		mu.Unlock()
		if found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no exported span in the row's trace after 30s (%d export requests)", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
