// Command walbox is walbox built with tracing: the command of cmd/walbox, with --otlp-endpoint.
// That setting exports a span per publish to an OTLP/HTTP collector. It lives in the otel module.
// So OpenTelemetry and the gRPC packages its exporter pulls in stay out of the product's go.mod.
// Build it with make build TAGS=otel, or go build ./cmd/walbox in this folder.
package main

import (
	"context"
	"os"
	"time"

	"github.com/walbox/walbox/internal/cli"
	"github.com/walbox/walbox/otel/tracing"
	"github.com/walbox/walbox/replication"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.Build{Version: version, Tracer: newTracer}))
}

// newTracer returns the observer that exports a span per publish to the OTLP/HTTP endpoint. It
// returns the function that flushes and stops the exporter too; that waits at most five seconds.
func newTracer(ctx context.Context, endpoint, exchange, version string) (replication.Observer, func(), error) {
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
