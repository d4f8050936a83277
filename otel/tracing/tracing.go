// Package tracing emits an OpenTelemetry span for each message the relay publishes. It is a
// producer span from the publish to the broker's confirm. Its parent is the trace named by the
// row's traceparent header, so a trace shows the hop through the outbox. It is a
// replication.Observer; with no exporter configured walbox does not use it at all. It lives in the
// otel module, so OpenTelemetry stays out of the product's go.mod. Only the walbox built with
// tracing (otel/cmd/walbox) links it. See docs/architecture.md for the relay it observes.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/walbox/walbox/replication"
)

// Tracer turns relay events into spans. Observe must be called from one goroutine (the relay's).
type Tracer struct {
	tracer   trace.Tracer
	exchange string
	open     map[uint64]trace.Span // by sequence number, in the current session
	prop     propagation.TraceContext
}

var _ replication.Observer = (*Tracer)(nil)

// New returns a Tracer that starts spans with tp; exchange names the destination.
func New(tp trace.TracerProvider, exchange string) *Tracer {
	return &Tracer{tracer: tp.Tracer("github.com/walbox/walbox"), exchange: exchange, open: map[uint64]trace.Span{}}
}

// Observe starts a span when a message is published and ends it at the broker's verdict.
func (t *Tracer) Observe(e replication.Event) {
	switch e.Kind {
	case replication.Published:
		t.start(e)
	case replication.Confirmed:
		t.end(e.Seq, nil)
	case replication.ConfirmFailed:
		t.end(e.Seq, e.Err)
	case replication.SessionEnded:
		err := e.Err
		if err == nil {
			err = errors.New("session ended before the confirm")
		}
		for seq := range t.open {
			t.end(seq, err)
		}
	}
}

func (t *Tracer) start(e replication.Event) {
	m := e.Message
	carrier := propagation.MapCarrier{}
	if tp, ok := m.Headers["traceparent"].(string); ok {
		carrier["traceparent"] = tp
	}
	if ts, ok := m.Headers["tracestate"].(string); ok {
		carrier["tracestate"] = ts
	}
	parent := t.prop.Extract(context.Background(), carrier)
	exchange := t.exchange
	if m.Exchange != "" {
		exchange = m.Exchange
	}
	_, span := t.tracer.Start(parent, "publish "+exchange, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemRabbitmq,
			semconv.MessagingOperationTypePublish,
			semconv.MessagingDestinationName(exchange),
			semconv.MessagingRabbitmqDestinationRoutingKey(m.Key()),
			semconv.MessagingMessageID(m.AMQPMessageID()),
			attribute.String("walbox.event_type", m.EventType),
			attribute.String("walbox.aggregate_type", m.AggregateType),
			attribute.String("walbox.aggregate_id", m.AggregateID),
		))
	t.open[e.Seq] = span
}

func (t *Tracer) end(seq uint64, err error) {
	span, ok := t.open[seq]
	if !ok {
		return
	}
	delete(t.open, seq)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "not confirmed")
	}
	span.End()
}

// NewOTLPProvider returns a tracer provider exporting over OTLP/HTTP to endpoint (a URL such as
// http://collector:4318), batching spans. Call Shutdown to flush.
func NewOTLPProvider(ctx context.Context, endpoint, version string) (*sdktrace.TracerProvider, error) {
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("otlp exporter for %s: %w", endpoint, err)
	}
	res := resource.NewSchemaless(semconv.ServiceName("walbox"), semconv.ServiceVersion(version))
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithResource(res)), nil
}
