package publisher_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/wire"
)

// By default an unroutable message goes to the alternate exchange's queue and is confirmed, so
// the stream does not stall on it.
func TestUnroutableMessageGoesToTheAlternateExchange(t *testing.T) {
	r := testenv.SharedRabbit(t)
	s, exchange := dial(t, r.URL(), publisher.Config{})
	m := newMessage("nobody.listens")
	seq := publish(t, s, m)
	if c := next(t, s); c.Seq != seq || c.Err != nil {
		t.Fatalf("Confirm = %+v, want seq %d acked", c, seq)
	}
	d := get(t, admin(t, r.URL()), exchange+".unroutable")
	if d.MessageId != m.ID.String() || d.RoutingKey != "nobody.listens" {
		t.Fatalf("alternate queue got %s with key %q, want %s", d.MessageId, d.RoutingKey, m.ID)
	}
}

func TestParkedMessageCarriesTheReason(t *testing.T) {
	r := testenv.SharedRabbit(t)
	s, exchange := dial(t, r.URL(), publisher.Config{})
	m := newMessage("")
	seq, err := s.Park(context.Background(), &wire.Parked{
		Message: *m, Reason: "event_type is empty", Table: "public.outbox", LSN: "0/16B3748"})
	if err != nil {
		t.Fatal(err)
	}
	if c := next(t, s); c.Seq != seq || c.Err != nil {
		t.Fatalf("Confirm = %+v, want seq %d acked", c, seq)
	}
	d := get(t, admin(t, r.URL()), exchange+".parked")
	checks := []struct {
		name      string
		got, want any
	}{
		{"message id", d.MessageId, m.ID.String()},
		{"reason", d.Headers[publisher.HeaderParkReason], "event_type is empty"},
		{"table", d.Headers[publisher.HeaderParkTable], "public.outbox"},
		{"lsn", d.Headers[publisher.HeaderParkLSN], "0/16B3748"},
		{"body", string(d.Body), string(m.Payload)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// A body over MaxMessageSize is refused before anything is written: the session lives on.
func TestOversizedMessageIsRefusedUpFront(t *testing.T) {
	r := testenv.SharedRabbit(t)
	s, _ := dial(t, r.URL(), publisher.Config{MaxMessageSize: 1024})
	m := newMessage("big.one")
	m.Payload = []byte(`"` + strings.Repeat("x", 2000) + `"`)
	_, err := s.Publish(context.Background(), m)
	if !errors.Is(err, wire.ErrUnpublishable) {
		t.Fatalf("Publish = %v, want ErrUnpublishable", err)
	}
	seq := publish(t, s, newMessage("small.one"))
	if c := next(t, s); c.Seq != seq || c.Err != nil {
		t.Fatalf("Confirm after the refusal = %+v, want seq %d acked", c, seq)
	}
}

// A message over the broker's max_message_size closes the channel; the session's failure says
// so with a *wire.TooLargeError carrying the broker's words, whether it is seen as the last
// Confirm or by a publish that follows. A smaller message on a new session is confirmed.
func TestBrokerRefusalForSizeIsTooLarge(t *testing.T) {
	r := testenv.StartRabbitConf(t, "max_message_size = 1048576")
	cfg := publisher.Config{MaxMessageSize: 4 << 20}
	s, _ := dial(t, r.URL(), cfg)
	big := newMessage("order.big")
	big.Payload = make([]byte, 2<<20)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := s.Publish(ctx, big); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	var publishErr error
	for publishErr == nil && s.Err() == nil {
		_, publishErr = s.Publish(ctx, newMessage("order.small"))
	}
	for _, err := range []error{publishErr, s.Err()} {
		var tl *wire.TooLargeError
		if err != nil && (!errors.As(err, &tl) || !strings.Contains(tl.Reason, "larger than configured max size 1048576")) {
			t.Errorf("error %v, want a *wire.TooLargeError with the broker's reason", err)
		}
	}
	var last wire.Confirm
	for c := range s.Confirms() {
		last = c
	}
	var tl *wire.TooLargeError
	if !errors.As(last.Err, &tl) || last.Seq != 0 {
		t.Errorf("last confirm %+v, want sequence 0 with a *wire.TooLargeError", last)
	}

	s2, _ := dial(t, r.URL(), cfg)
	if _, err := s2.Publish(ctx, newMessage("order.small")); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-s2.Confirms():
		if c.Err != nil {
			t.Errorf("small message after the refusal: %v", c.Err)
		}
	case <-ctx.Done():
		t.Fatal("no confirm for the small message")
	}
}
