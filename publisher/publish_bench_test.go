package publisher_test

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/wire"
)

// BenchmarkMessageNoHeaders builds a message whose row has no headers of its own.
func BenchmarkMessageNoHeaders(b *testing.B) {
	m := newMessage("order.created")
	b.ReportAllocs()
	for b.Loop() {
		_ = publisher.Publishing(m, "walbox")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkMessageNestedHeaders builds a message with a traceparent, a nested object, a list and
// numbers among its headers: every conversion of tableValue.
func BenchmarkMessageNestedHeaders(b *testing.B) {
	m := newMessage("order.created")
	m.Headers = map[string]any{
		"traceparent": traceparent,
		"tenant":      map[string]any{"id": "acme", "tier": float64(2)},
		"tags":        []any{"eu", "priority"},
		"attempt":     float64(1),
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = publisher.Publishing(m, "walbox")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkSessionPublish publishes through a Session to a real broker with the default window,
// reading confirms in the publishing goroutine as the relay does, and waits for the last confirm.
// Compare with BenchmarkRawPublish for the Session's own cost.
func BenchmarkSessionPublish(b *testing.B) {
	if testenv.Short() {
		b.Skip("needs RabbitMQ")
	}
	r := testenv.SharedRabbit(b)
	s, exchange := dial(b, r.URL(), publisher.Config{})
	bindQueue(b, admin(b, r.URL()), exchange, "#", nil)
	m := newMessage("order.created")
	m.Headers = map[string]any{"traceparent": traceparent}
	m.Payload = make([]byte, 300)
	ctx := context.Background()
	var published, confirmed uint64
	take := func(c wire.Confirm) {
		if c.Err != nil {
			b.Fatalf("confirm %d: %v", c.Seq, c.Err)
		}
		confirmed++
	}
	b.ReportAllocs()
	for b.Loop() {
		for drained := false; !drained; {
			select {
			case c := <-s.Confirms():
				take(c)
			default:
				drained = true
			}
		}
		if _, err := s.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
		published++
	}
	for confirmed < published {
		take(<-s.Confirms())
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkRawPublish publishes the same message with amqp091 alone: confirm mode, the same
// window of pipelined confirms, no Session.
func BenchmarkRawPublish(b *testing.B) {
	if testenv.Short() {
		b.Skip("needs RabbitMQ")
	}
	r := testenv.SharedRabbit(b)
	ch := admin(b, r.URL())
	exchange := testenv.UniqueName("raw")
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, false, true, false, false, nil); err != nil {
		b.Fatal(err)
	}
	bindQueue(b, ch, exchange, "#", nil)
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	acks := ch.NotifyPublish(make(chan amqp.Confirmation, publisher.DefaultWindow+64))
	m := newMessage("order.created")
	m.Headers = map[string]any{"traceparent": traceparent}
	m.Payload = make([]byte, 300)
	msg := publisher.Publishing(m, "walbox")
	ctx := context.Background()
	inflight := 0
	take := func() {
		if c := <-acks; !c.Ack {
			b.Fatalf("nack %d", c.DeliveryTag)
		}
		inflight--
	}
	b.ReportAllocs()
	for b.Loop() {
		for inflight >= publisher.DefaultWindow {
			take()
		}
		if err := ch.PublishWithContext(ctx, exchange, m.EventType, true, false, msg); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	for inflight > 0 {
		take()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
