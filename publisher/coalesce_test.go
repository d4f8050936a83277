package publisher_test

import (
	"context"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/publisher"
)

// A burst of messages published before a Flush reaches the broker in a few socket writes, and
// every message is delivered, in order, and confirmed.
func TestBurstIsWrittenTogetherAndConfirmed(t *testing.T) {
	r := testenv.SharedRabbit(t)
	defer publisher.SetCoalesceDelay(200 * time.Millisecond)()
	s, exchange := dial(t, r.URL(), publisher.Config{Window: 1024})
	ch := admin(t, r.URL())
	q := bindQueue(t, ch, exchange, "#", nil)

	const n = 500
	ids := make([]string, 0, n)
	before := publisher.SocketWrites(s)
	for range n {
		m := newMessage("order.created")
		ids = append(ids, m.AMQPMessageID())
		publish(t, s, m)
	}
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if w := publisher.SocketWrites(s) - before; w > n/50 {
		t.Errorf("%d messages took %d socket writes, want at most %d", n, w, n/50)
	}
	for i := uint64(1); i <= n; i++ {
		if c := next(t, s); c.Seq != i || c.Err != nil {
			t.Fatalf("Confirm: got %+v, want seq %d, nil error", c, i)
		}
	}
	for i, id := range ids {
		if d := get(t, ch, q); d.MessageId != id {
			t.Fatalf("delivery %d: message %s, want %s", i, d.MessageId, id)
		}
	}
}

// Without a Flush, the session writes what it holds by itself, a moment later.
func TestHeldMessageIsWrittenByItself(t *testing.T) {
	r := testenv.SharedRabbit(t)
	s, _ := dial(t, r.URL(), publisher.Config{})
	start := time.Now()
	seq := publish(t, s, newMessage("order.created"))
	if c := next(t, s); c.Seq != seq || c.Err != nil {
		t.Fatalf("Confirm: got %+v, want seq %d, nil error", c, seq)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("confirmed after %v", d)
	}
}

// Heartbeats and synchronous methods (here the check that a message's exchange exists) are
// never held: each goes out at once, and takes what is held with it.
func TestHeartbeatAndMethodsAreNotHeld(t *testing.T) {
	r := testenv.SharedRabbit(t)
	defer publisher.SetCoalesceDelay(time.Hour)()
	ch := admin(t, r.URL())

	s, _ := dial(t, r.URL(), publisher.Config{Heartbeat: time.Second})
	start := time.Now()
	seq := publish(t, s, newMessage("order.created"))
	if c := next(t, s); c.Seq != seq || c.Err != nil { // the heartbeat wrote it
		t.Fatalf("Confirm: got %+v, want seq %d, nil error", c, seq)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a held message went out with a heartbeat after %v, want within the 1s interval", d)
	}

	s, _ = dial(t, r.URL(), publisher.Config{})
	other := testenv.UniqueName("other")
	if err := ch.ExchangeDeclare(other, "topic", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	first := publish(t, s, newMessage("order.created"))
	m := newMessage("order.created")
	m.Exchange = other
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Publish(ctx, m); err != nil { // checks the exchange on a channel of its own first
		t.Fatalf("Publish to another exchange while a message is held: %v", err)
	}
	if c := next(t, s); c.Seq != first || c.Err != nil {
		t.Fatalf("Confirm: got %+v, want seq %d, nil error", c, first)
	}
}

// A Confirm says when its message's last frame was written to the socket: for messages held
// back, by the write that the delay made, all three in one; always before the broker's verdict.
func TestConfirmSaysWhenWritten(t *testing.T) {
	r := testenv.SharedRabbit(t)
	defer publisher.SetCoalesceDelay(200 * time.Millisecond)()
	s, _ := dial(t, r.URL(), publisher.Config{})

	published := time.Now()
	for range 3 {
		publish(t, s, newMessage("order.created"))
	}
	var written time.Time
	for i := uint64(1); i <= 3; i++ {
		c := next(t, s)
		if c.Seq != i || c.Err != nil {
			t.Fatalf("Confirm: got %+v, want seq %d, nil error", c, i)
		}
		if held := c.Written.Sub(published); held < 150*time.Millisecond || c.At.Before(c.Written) {
			t.Errorf("seq %d: written %v after the publish, confirmed %v after; want the 200ms hold, before the confirm",
				i, held, c.At.Sub(published))
		}
		if i > 1 && !c.Written.Equal(written) {
			t.Errorf("seq %d: written at %v, seq 1 at %v; want one write", i, c.Written, written)
		}
		written = c.Written
	}
}

// Messages published at a pace slower than half the hold bound, each followed by a Flush, go out
// at once: none waits for a next one that would not join it. At a quick pace they share writes.
func TestFlushHoldsOnlyWhatOthersWillJoin(t *testing.T) {
	r := testenv.SharedRabbit(t)
	defer publisher.SetCoalesceDelay(100 * time.Millisecond)()
	s, _ := dial(t, r.URL(), publisher.Config{})

	published := map[uint64]time.Time{}
	for range 4 {
		seq := publish(t, s, newMessage("order.created"))
		published[seq] = time.Now()
		if err := s.Flush(); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		time.Sleep(80 * time.Millisecond)
	}
	for range 4 {
		c := next(t, s)
		if c.Err != nil {
			t.Fatalf("Confirm: %+v", c)
		}
		if held := c.Written.Sub(published[c.Seq]); held > 30*time.Millisecond {
			t.Errorf("seq %d held %v at a pace of 80 ms, want written at the Flush", c.Seq, held)
		}
	}

	const n = 30
	before := publisher.SocketWrites(s)
	for range n {
		publish(t, s, newMessage("order.created"))
		if err := s.Flush(); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for range n {
		if c := next(t, s); c.Err != nil {
			t.Fatalf("Confirm: %+v", c)
		}
	}
	if w := publisher.SocketWrites(s) - before; w > n*2/3 {
		t.Errorf("%d messages 5 ms apart took %d socket writes, want them grouped", n, w)
	}
}
