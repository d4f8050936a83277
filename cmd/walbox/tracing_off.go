//go:build !otel

package main

import (
	"context"
	"errors"

	"github.com/walbox/walbox/replication"
)

// withTracing says whether this binary can export spans. By default it cannot: OpenTelemetry and
// the gRPC packages its exporter pulls in are most of the dependencies a build would link. Build
// with -tags otel (make build TAGS=otel) for a walbox that exports spans; see tracing_otel.go.
const withTracing = false

// errNoTracing refuses an OTLP endpoint rather than ignoring it: an operator who set one expects
// spans, and silence would look like a broken collector.
var errNoTracing = errors.New("this walbox was built without tracing; unset it, " +
	"or use a walbox built with tracing (go build -tags otel ./cmd/walbox, or make build TAGS=otel)")

func newTracer(context.Context, string, string) (replication.Observer, func(), error) {
	return nil, nil, errNoTracing
}
