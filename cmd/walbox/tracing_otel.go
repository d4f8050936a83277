//go:build otel

package main

import (
	"context"
	"time"

	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/tracing"
)

// withTracing says whether this binary can export spans: built with -tags otel, it can.
const withTracing = true

// newTracer returns the observer that exports a span per publish to the OTLP/HTTP endpoint, and
// the function that flushes and stops the exporter (waiting at most five seconds).
func newTracer(ctx context.Context, endpoint, exchange string) (replication.Observer, func(), error) {
	tp, err := tracing.NewOTLPProvider(ctx, endpoint, version)
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}
	return tracing.New(tp, exchange), stop, nil
}
