package streamconsumer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/consumer/consumermetrics"
	"github.com/walbox/walbox/wire"
)

// The stream consumer counts handled messages and failed attempts, and measures the lag from the
// commit time. It moves past walbox's canary without handling it, and handles a producer's row of
// the canary's event type.
func TestStreamConsumerMetricsCountHandledFailedAndLag(t *testing.T) {
	committed := time.Now().Add(-3 * time.Second)
	msgs := []*wire.Message{
		{ID: uuid.New(), EventType: "order.created", Payload: []byte(`{}`), CommitTime: committed},
		{ID: uuid.New(), EventType: wire.CanaryEventType, Payload: []byte(`{}`), CommitTime: committed,
			Headers: map[string]any{wire.HeaderCanary: true}},
		{ID: uuid.New(), EventType: "order.created", Payload: []byte(`{}`)},
		{ID: uuid.New(), EventType: wire.CanaryEventType, Payload: []byte(`{}`)}, // a producer's row
	}
	se := newStreamEnvOf(t, msgs)
	flaky, canary, userRow := se.ids[2], se.ids[1], se.ids[3]
	cfg := se.config()
	reg := prometheus.NewRegistry()
	cfg.Metrics = consumermetrics.New(reg)
	var canaries int
	se.runUntil(t, cfg, func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		if d.MessageID == canary {
			canaries++
		}
		if d.MessageID == flaky && d.Attempt == 1 {
			return errors.New("flaky")
		}
		return recordEffect(ctx, tx, d)
	}, 4)
	if canaries != 0 {
		t.Errorf("the handler got the canary %d times", canaries)
	}
	if n := se.count(t, "SELECT count(*) FROM effects WHERE message_id = $1", userRow); n != 1 {
		t.Errorf("the producer's row of type %s was handled %d times, want once: only walbox's header makes a canary",
			wire.CanaryEventType, n)
	}
	want := `
# HELP walbox_consumer_failed_total Failed attempts: the handler returned an error, or the database failed.
# TYPE walbox_consumer_failed_total counter
walbox_consumer_failed_total{consumer="billing"} 1
# HELP walbox_consumer_handled_total Messages handled: the handler returned nil and its transaction committed. Duplicates are not counted.
# TYPE walbox_consumer_handled_total counter
walbox_consumer_handled_total{consumer="billing"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "walbox_consumer_handled_total", "walbox_consumer_failed_total"); err != nil {
		t.Error(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "walbox_consumer_lag_seconds" {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != 1 || h.GetSampleSum() < 3 || h.GetSampleSum() > 60 {
			t.Errorf("walbox_consumer_lag_seconds: %d samples, sum %v; want 1 of at least 3s (the first message's)",
				h.GetSampleCount(), h.GetSampleSum())
		}
		return
	}
	t.Error("no walbox_consumer_lag_seconds")
}
