package cli

import (
	"context"
	"errors"

	"github.com/walbox/walbox/replication"
)

// Tracer starts the export of spans to the OTLP/HTTP endpoint. It returns the observer that
// exports a span per publish, and the function that flushes and stops the exporter. The version
// is the walbox's, for the spans' resource.
type Tracer func(ctx context.Context, endpoint, exchange, version string) (replication.Observer, func(), error)

// errNoTracing refuses an OTLP endpoint rather than ignoring it. An operator who set one expects
// spans, and silence would look like a broken collector.
var errNoTracing = errors.New("this walbox was built without tracing; unset it, " +
	"or use a walbox built with tracing (make build TAGS=otel, or go build ./cmd/walbox in the otel module)")

// newTracer starts the build's tracer. A walbox built without one refuses the endpoint. The one
// in cmd/walbox is such a build. OpenTelemetry and its exporter's gRPC packages are most of what
// it would link. The one in otel/cmd/walbox passes the OTLP tracer.
func newTracer(ctx context.Context, endpoint, exchange string) (replication.Observer, func(), error) {
	if build.Tracer == nil {
		return nil, nil, errNoTracing
	}
	return build.Tracer(ctx, endpoint, exchange, build.Version)
}
