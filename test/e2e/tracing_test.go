package e2e_test

import (
	"bytes"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// otelWalbox returns the walbox of the otel module, the build that exports spans (the default
// build refuses an OTLP endpoint).
func otelWalbox(t *testing.T) string {
	t.Helper()
	return testenv.Build(t, "otel/cmd/walbox", "-race")
}

// With an OTLP endpoint set, walbox built with tracing exports a span per publish in the trace of
// the row's traceparent (insertTx writes one into every row's headers).
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
	w.bin = otelWalbox(t)
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

// The default build has no tracing: an OTLP endpoint makes walbox run exit 2 at start with one
// line saying so, before it touches either server.
func TestOTLPEndpointRefusedWithoutTracing(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	r := w.startRelay("WALBOX_OTLP_ENDPOINT=http://127.0.0.1:4318")
	if code := r.Wait(30 * time.Second); code != 2 {
		t.Fatalf("walbox run exited %d, want 2:\n%s", code, r.Output())
	}
	out := r.Output()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, "built without tracing") || !strings.Contains(out, "TAGS=otel") {
		t.Fatalf("want one line saying the build has no tracing and how to get one, got:\n%s", out)
	}
}
