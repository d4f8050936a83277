package tracing_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/walbox/walbox/otel/tracing"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/replication"
)

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestSpanPerPublishLinkedToTheRowsTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tr := tracing.New(tp, "outbox")

	traced := &outbox.Message{ID: uuid.New(), EventType: "order.created", Headers: map[string]any{"traceparent": traceparent}}
	plain := &outbox.Message{ID: uuid.New(), EventType: "order.paid"}
	tr.Observe(replication.Event{Kind: replication.Published, Seq: 1, Message: traced})
	tr.Observe(replication.Event{Kind: replication.Published, Seq: 2, Message: plain})
	tr.Observe(replication.Event{Kind: replication.Published, Seq: 3, Message: plain})
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans ended before any confirm", n)
	}
	tr.Observe(replication.Event{Kind: replication.Confirmed, Seq: 1})
	tr.Observe(replication.Event{Kind: replication.ConfirmFailed, Seq: 2, Err: errors.New("nacked")})
	tr.Observe(replication.Event{Kind: replication.SessionEnded, Err: errors.New("connection lost")})

	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	first := spans[0]
	if got := first.SpanContext.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id %s, want the row's", got)
	}
	if got := first.Parent.SpanID().String(); got != "00f067aa0ba902b7" {
		t.Errorf("parent span %s, want the row's", got)
	}
	if first.SpanKind != trace.SpanKindProducer || first.Name != "publish outbox" {
		t.Errorf("span %q kind %v", first.Name, first.SpanKind)
	}
	if spans[1].Status.Code.String() != "Error" || spans[2].Status.Code.String() != "Error" {
		t.Errorf("unconfirmed spans have status %v and %v, want Error", spans[1].Status.Code, spans[2].Status.Code)
	}
	if spans[1].Parent.IsValid() {
		t.Error("a message without traceparent got a parent")
	}
}
