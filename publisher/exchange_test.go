package publisher_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/wire"
)

// declareExchange declares an exchange of its own for a test and deletes it at the end.
func declareExchange(tb testing.TB, ch *amqp.Channel, name, kind string) {
	tb.Helper()
	if err := ch.ExchangeDeclare(name, kind, false, false, false, false, nil); err != nil {
		tb.Fatalf("declare exchange %s: %v", name, err)
	}
	tb.Cleanup(func() { _ = ch.ExchangeDelete(name, false, false) })
}

// A message that names its exchange goes there, with its own routing key and message id; the
// exchange need not be a topic exchange, and nothing is declared for it.
func TestMessageGoesToItsOwnExchange(t *testing.T) {
	r := testenv.SharedRabbit(t)
	ch := admin(t, r.URL())
	own := testenv.UniqueName("legacy")
	declareExchange(t, ch, own, amqp.ExchangeDirect)
	q := bindQueue(t, ch, own, "order.order.created", nil)
	s, exchange := dial(t, r.URL(), publisher.Config{})
	relayQueue := bindQueue(t, ch, exchange, "#", nil)

	for i, id := range []string{"42", "43"} { // the second one uses the session's verdict
		m := newMessage("order.created")
		m.Exchange, m.RoutingKey, m.MessageID = own, "order.order.created", id
		seq := publish(t, s, m)
		if c := next(t, s); c.Seq != seq || c.Err != nil || seq != uint64(i+1) {
			t.Fatalf("Confirm: got %+v for seq %d, want seq %d acked", c, seq, i+1)
		}
		d := get(t, ch, q)
		if d.Exchange != own || d.RoutingKey != "order.order.created" || d.MessageId != id || d.Type != "order.created" {
			t.Errorf("got exchange %q, key %q, id %q, type %q; want %q, order.order.created, %s, order.created",
				d.Exchange, d.RoutingKey, d.MessageId, d.Type, own, id)
		}
	}
	if _, ok, err := ch.Get(relayQueue, true); ok || err != nil {
		t.Errorf("the relay's exchange got a message (%v)", err)
	}
}

// A message for a missing exchange is refused up front as unpublishable, naming the exchange,
// and the session lives on. Once the exchange exists, the session finds it.
func TestMissingExchangeIsUnpublishable(t *testing.T) {
	defer publisher.SetRecheckMissing(300 * time.Millisecond)()
	r := testenv.SharedRabbit(t)
	s, exchange := dial(t, r.URL(), publisher.Config{})
	ch := admin(t, r.URL())
	bindQueue(t, ch, exchange, "#", nil)
	missing := testenv.UniqueName("missing")

	m := newMessage("order.created")
	m.Exchange = missing
	for range 2 { // the second time from the session's verdict
		seq, err := s.Publish(context.Background(), m)
		if !errors.Is(err, wire.ErrUnpublishable) || !errors.Is(err, publisher.ErrInvalidMessage) ||
			!strings.Contains(err.Error(), missing) || seq != 0 {
			t.Fatalf("Publish: got %d, %v; want ErrUnpublishable naming %s", seq, err, missing)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("session ended: %v", err)
	}
	seq := publish(t, s, newMessage("order.created"))
	if c := next(t, s); c.Seq != 1 || c.Err != nil || seq != 1 {
		t.Fatalf("Confirm after the refusal: got %+v for seq %d, want seq 1 acked", c, seq)
	}

	declareExchange(t, ch, missing, amqp.ExchangeTopic)
	q := bindQueue(t, ch, missing, "#", nil)
	deadline := time.Now().Add(waitFor)
	for {
		_, err := s.Publish(context.Background(), m)
		if err == nil {
			break
		}
		if !errors.Is(err, publisher.ErrInvalidMessage) || time.Now().After(deadline) {
			t.Fatalf("Publish once the exchange exists: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c := next(t, s); c.Seq != 2 || c.Err != nil {
		t.Fatalf("Confirm: got %+v, want seq 2 acked", c)
	}
	if d := get(t, ch, q); d.MessageId != m.ID.String() {
		t.Errorf("got message %s, want %s", d.MessageId, m.ID)
	}
}

// The check of a message's exchange waits for the broker's answer, which a stalled broker never
// gives: when ctx ends, the session cuts the connection, as for a stuck write. A ctx that has
// ended already leaves the session usable.
func TestExchangeCheckHonoursContext(t *testing.T) {
	r := testenv.SharedRabbit(t)
	p, url := startProxy(t, r.URL())
	s, _ := dial(t, url, publisher.Config{CloseTimeout: time.Second})
	m := newMessage("order.created")
	m.Exchange = testenv.UniqueName("unchecked")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Publish(ctx, m); !errors.Is(err, context.Canceled) || errors.Is(err, publisher.ErrClosed) {
		t.Fatalf("Publish with an ended ctx: got %v, want context.Canceled only", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("session ended: %v", err)
	}

	p.down.pause()
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Publish(ctx, m)
	if !errors.Is(err, publisher.ErrClosed) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Publish with a stalled broker: got %v, want ErrClosed and DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Publish returned after %v", d)
	}
	if last := untilClosed(t, s); !errors.Is(last.Err, publisher.ErrClosed) {
		t.Errorf("last Confirm: got %+v, want ErrClosed", last)
	}
}
