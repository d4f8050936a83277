package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/consumer/consumermetrics"
	"github.com/walbox/walbox/wire"
)

// The consumer counts handled messages and failed attempts, and measures the lag from the commit
// time header. A duplicate is not handled again; walbox's canary is acknowledged unhandled. A
// producer's row of the canary's event type is handled: it lacks the canary's header.
func TestConsumerMetricsCountHandledFailedAndLag(t *testing.T) {
	e := newEnv(t, nil)
	reg := prometheus.NewRegistry()
	cfg := e.config()
	cfg.Bindings = []consumer.Binding{{Exchange: e.exchange, Key: "#"}}
	cfg.Metrics = consumermetrics.New(reg)
	var got calls
	c, err := consumer.New(e.pool, cfg, func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		got.add(d)
		if d.MessageID == "b" && d.Attempt == 1 {
			return errors.New("transient")
		}
		return recordEffect(ctx, tx, d)
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	e.waitConsuming(t)

	committed := time.Now().Add(-3 * time.Second)
	e.publishHeaders(t, "a", "order.created", amqp.Table{wire.HeaderCommitTime: wire.FormatCommitTime(committed)})
	e.publishHeaders(t, "a", "order.created", nil)
	e.publishHeaders(t, "canary-1", wire.CanaryEventType, amqp.Table{wire.HeaderCanary: true})
	e.publishHeaders(t, "user-row", wire.CanaryEventType, nil) // a producer's row of the canary's type
	e.publishHeaders(t, "b", "order.created", nil)
	eventually(t, 20*time.Second, "message b handled", func() bool {
		return e.count(t, "SELECT count(*) FROM effects WHERE message_id = 'b'") == 1
	})
	eventually(t, 10*time.Second, "queue empty", func() bool { return e.readyMessages(t, e.queue) == 0 })
	for _, d := range got.deliveries() {
		if d.MessageID == "canary-1" {
			t.Errorf("the handler got canary message %s", d.MessageID)
		}
	}
	if n := e.count(t, "SELECT count(*) FROM effects WHERE message_id = 'user-row'"); n != 1 {
		t.Errorf("the producer's row of type %s was handled %d times, want once: only walbox's header makes a canary",
			wire.CanaryEventType, n)
	}
	if n, _, _ := metric(t, reg, "walbox_consumer_handled_total", cfg.Queue); n != 3 {
		t.Errorf("walbox_consumer_handled_total = %v, want 3 (a, the user's row and b; the duplicate and the canary are not handled)", n)
	}
	if n, _, _ := metric(t, reg, "walbox_consumer_failed_total", cfg.Queue); n != 1 {
		t.Errorf("walbox_consumer_failed_total = %v, want 1 (b's first attempt)", n)
	}
	if _, n, sum := metric(t, reg, "walbox_consumer_lag_seconds", cfg.Queue); n != 1 || sum < 3 || sum > 60 {
		t.Errorf("walbox_consumer_lag_seconds: %d samples, sum %v; want 1 of at least 3s (a's commit time; b has none)", n, sum)
	}
}

// publishHeaders publishes a message of type and routing key key, with headers, and waits for the confirm.
func (e *env) publishHeaders(tb testing.TB, id, key string, headers amqp.Table) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := e.ch.PublishWithDeferredConfirmWithContext(ctx, e.exchange, key, true, false, amqp.Publishing{
		MessageId: id, Type: key, ContentType: "application/json", DeliveryMode: amqp.Persistent,
		Headers: headers, Body: []byte(`{}`),
	})
	if err != nil {
		tb.Fatalf("publish %s: %v", id, err)
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		tb.Fatalf("publish %s: not confirmed (%v)", id, err)
	}
}

// metric returns the value of the counter name of reg with the label consumer, or the sample count
// and sum of the histogram. It fails the test if there is none.
func metric(tb testing.TB, reg *prometheus.Registry, name, consumerName string) (value float64, count uint64, sum float64) {
	tb.Helper()
	families, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" && l.GetValue() == consumerName {
					h := m.GetHistogram()
					return m.GetCounter().GetValue(), h.GetSampleCount(), h.GetSampleSum()
				}
			}
		}
	}
	tb.Fatalf("no metric %s{consumer=%q}", name, consumerName)
	return 0, 0, 0
}
