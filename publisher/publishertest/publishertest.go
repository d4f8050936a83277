// Package publishertest is the conformance suite of the publisher contract. The contract is what
// the relay (package replication) relies on from a publishing session. The publisher's Session and
// Lanes run it against a real RabbitMQ node. The relay's test fake runs it too, so that the fake
// behaves as the real thing does. See docs/architecture.md for the relay and the publisher.
//
// The contract:
//   - Publish and Park return sequence numbers 1, 2, 3, ... in the order of the calls.
//   - Confirms yields exactly one verdict per message under that number.
//   - A verdict has a nil Err only if the broker took the message: not nacked, not returned.
//   - The verdicts of one aggregate come in the order it was published.
//   - A session that ends yields a last verdict with Seq 0 and an error wrapping
//     wire.ErrSessionClosed. It then confirms nothing more, closes Confirms, and fails every later
//     Publish with such an error.
//   - The broker may hold up a Publish (a memory or disk alarm): it ends with its context. Such a
//     Publish has written nothing, and leaves the session usable.
//   - Flush, where the publisher has it (wire.Flusher), sends what it holds. It sends at once or
//     within the short bound the publisher states. So every message published before Flush gets its
//     verdict without another call.
package publishertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/walbox/walbox/wire"
)

// Publisher is the contract under test (wire.Publisher), as package replication uses it.
type Publisher = wire.Publisher

// Kind is the kind of message a Harness makes: what the broker does with it.
type Kind int

const (
	// Routed messages are taken and confirmed.
	Routed Kind = iota
	// Nacked messages are refused with a nack.
	Nacked
	// Returned messages are unroutable, and returned.
	Returned
)

// Harness is what the suite needs of a publisher and the broker behind it.
type Harness interface {
	// Dial opens a publisher; the harness closes it when the test ends.
	Dial(t *testing.T) Publisher
	// Message returns a new message of kind k, of aggregate id aggregate.
	Message(t *testing.T, k Kind, aggregate string) *wire.Message
	// Hold keeps the broker's verdicts from reaching p until release is called.
	Hold(t *testing.T, p Publisher) (release func())
	// Cut ends p's connection as a failing network or broker would.
	Cut(t *testing.T, p Publisher)
	// Block makes the broker block publishing on p and returns once p's next Publish waits for it.
	// It returns how many Routed messages the harness published on p to get there. unblock ends the
	// block.
	Block(t *testing.T, p Publisher) (published int, unblock func())
}

// Options says what more than the contract a publisher promises.
type Options struct {
	// InOrder: verdicts arrive in sequence order, not only per aggregate (one channel).
	InOrder bool
	// Flushes: the publisher holds what it is handed and is a wire.Flusher. After Flush it sends
	// what it holds, at once or within its stated bound.
	Flushes bool
}

// wait bounds every wait of the suite.
const wait = 20 * time.Second

// Run runs the suite against h.
func Run(t *testing.T, h Harness, o Options) {
	t.Run("confirms every message once, in order", func(t *testing.T) { testConfirmOrder(t, h, o) })
	t.Run("a nack fails only its message", func(t *testing.T) { testRefused(t, h, Nacked) })
	t.Run("a return fails only its message", func(t *testing.T) { testRefused(t, h, Returned) })
	t.Run("a close in flight confirms nothing and ends the session", func(t *testing.T) { testCut(t, h) })
	t.Run("Close in flight ends Confirms", func(t *testing.T) { testClose(t, h) })
	t.Run("a blocked broker holds Publish until its context ends", func(t *testing.T) { testBlocked(t, h) })
	if o.Flushes {
		t.Run("Flush writes what is held", func(t *testing.T) { testFlush(t, h) })
	}
}

func testConfirmOrder(t *testing.T, h Harness, o Options) {
	p := h.Dial(t)
	const perAggregate = 20
	aggregates := []string{"a", "b", "c", "d", "e"}
	byAggregate := map[uint64]string{}
	var seq uint64
	for i := range perAggregate {
		for _, agg := range aggregates {
			m := h.Message(t, Routed, agg)
			var got uint64
			if i%7 == 3 { // a parked message takes the next number too
				got = park(t, p, m)
			} else {
				got = publish(t, p, m)
			}
			seq++
			if got != seq {
				t.Fatalf("message %d numbered %d", seq, got)
			}
			byAggregate[got] = agg
		}
	}
	flush(t, p)
	last := map[string]uint64{}
	seen := map[uint64]bool{}
	var prev uint64
	for range seq {
		c := next(t, p)
		if c.Err != nil || c.Seq == 0 || c.Seq > seq {
			t.Fatalf("verdict %+v, want a confirm of 1 to %d", c, seq)
		}
		if seen[c.Seq] {
			t.Fatalf("message %d confirmed twice", c.Seq)
		}
		seen[c.Seq] = true
		agg := byAggregate[c.Seq]
		if c.Seq < last[agg] {
			t.Fatalf("aggregate %s: message %d confirmed after %d", agg, c.Seq, last[agg])
		}
		last[agg] = c.Seq
		if o.InOrder && c.Seq != prev+1 {
			t.Fatalf("message %d confirmed after %d", c.Seq, prev)
		}
		prev = c.Seq
	}
	none(t, p)
}

func testRefused(t *testing.T, h Harness, k Kind) {
	p := h.Dial(t)
	publish(t, p, h.Message(t, Routed, "a"))
	publish(t, p, h.Message(t, k, "a"))
	publish(t, p, h.Message(t, Routed, "a"))
	flush(t, p)
	got := map[uint64]error{}
	for range 3 {
		c := next(t, p)
		if c.Seq == 0 {
			t.Fatalf("session ended: %v", c.Err)
		}
		got[c.Seq] = c.Err
	}
	if got[1] != nil || got[3] != nil {
		t.Fatalf("the messages beside the refused one: %v, %v; want confirmed", got[1], got[3])
	}
	if got[2] == nil {
		t.Fatal("the refused message was confirmed")
	}
	if errors.Is(got[2], wire.ErrSessionClosed) {
		t.Fatalf("the refusal %v says the session ended", got[2])
	}
	// The session lives on.
	publish(t, p, h.Message(t, Routed, "a"))
	flush(t, p)
	if c := next(t, p); c.Seq != 4 || c.Err != nil {
		t.Fatalf("verdict after the refusal %+v, want 4 confirmed", c)
	}
}

func testCut(t *testing.T, h Harness) {
	p := h.Dial(t)
	release := h.Hold(t, p)
	defer release()
	for _, agg := range []string{"a", "b", "c"} {
		publish(t, p, h.Message(t, Routed, agg))
	}
	flush(t, p)
	h.Cut(t, p)
	last := untilClosed(t, p, func(c wire.Confirm) {
		if c.Err == nil {
			t.Errorf("message %d confirmed after the connection was cut", c.Seq)
		}
	})
	if last.Seq != 0 || !errors.Is(last.Err, wire.ErrSessionClosed) {
		t.Fatalf("last verdict %+v, want Seq 0 and an error wrapping wire.ErrSessionClosed", last)
	}
	afterEnd(t, h, p)
}

func testClose(t *testing.T, h Harness) {
	p := h.Dial(t)
	release := h.Hold(t, p)
	defer release()
	publish(t, p, h.Message(t, Routed, "a"))
	flush(t, p)
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("Close with a message in flight did not return")
	}
	untilClosed(t, p, func(c wire.Confirm) {
		if c.Seq != 0 && c.Err == nil {
			t.Errorf("message %d confirmed after Close, though the broker's verdicts were held", c.Seq)
		}
	})
	afterEnd(t, h, p)
}

func testBlocked(t *testing.T, h Harness) {
	p := h.Dial(t)
	n, unblock := h.Block(t, p)
	blocked := true
	defer func() {
		if blocked {
			unblock()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.Publish(ctx, h.Message(t, Routed, "a"))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, wire.ErrSessionClosed) {
		t.Fatalf("Publish while blocked: %v, want the context's deadline and a live session", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Publish while blocked returned after %v, long after its context ended", d)
	}
	unblock()
	blocked = false
	if got, want := publish(t, p, h.Message(t, Routed, "a")), uint64(n+1); got != want {
		t.Fatalf("Publish after the block numbered %d, want %d: the one that gave up took no number", got, want)
	}
	flush(t, p)
	for range n + 1 {
		if c := next(t, p); c.Seq == 0 || c.Err != nil {
			t.Fatalf("verdict after the block %+v, want a confirm", c)
		}
	}
}

func testFlush(t *testing.T, h Harness) {
	p := h.Dial(t)
	f, ok := p.(wire.Flusher)
	if !ok {
		t.Fatalf("%T has no Flush", p)
	}
	for _, agg := range []string{"a", "b", "c", "a", "b"} {
		publish(t, p, h.Message(t, Routed, agg))
	}
	if err := f.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	for range 5 {
		if c := next(t, p); c.Seq == 0 || c.Err != nil {
			t.Fatalf("verdict after Flush %+v, want a confirm", c)
		}
	}
	if err := f.Flush(); err != nil {
		t.Fatalf("Flush with nothing held: %v", err)
	}
}

// afterEnd checks that an ended session refuses to publish, saying it ended.
func afterEnd(t *testing.T, h Harness, p Publisher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := p.Publish(ctx, h.Message(t, Routed, "a")); !errors.Is(err, wire.ErrSessionClosed) {
		t.Fatalf("Publish after the end: %v, want an error wrapping wire.ErrSessionClosed", err)
	}
	m := h.Message(t, Routed, "a")
	if _, err := p.Park(ctx, &wire.Parked{Message: *m, Reason: "test", Table: "t"}); !errors.Is(err, wire.ErrSessionClosed) {
		t.Fatalf("Park after the end: %v, want an error wrapping wire.ErrSessionClosed", err)
	}
}

func publish(t *testing.T, p Publisher, m *wire.Message) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	seq, err := p.Publish(ctx, m)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	return seq
}

func park(t *testing.T, p Publisher, m *wire.Message) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	seq, err := p.Park(ctx, &wire.Parked{Message: *m, Reason: "test", Table: "public.outbox", LSN: "0/0"})
	if err != nil {
		t.Fatalf("Park: %v", err)
	}
	return seq
}

func flush(t *testing.T, p Publisher) {
	t.Helper()
	if f, ok := p.(wire.Flusher); ok {
		if err := f.Flush(); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
}

// next reads one verdict, failing the test if none comes in time or Confirms is closed.
func next(t *testing.T, p Publisher) wire.Confirm {
	t.Helper()
	select {
	case c, ok := <-p.Confirms():
		if !ok {
			t.Fatal("Confirms closed")
		}
		return c
	case <-time.After(wait):
		t.Fatal("no verdict")
	}
	panic("unreachable")
}

// none checks that no verdict follows for a moment.
func none(t *testing.T, p Publisher) {
	t.Helper()
	select {
	case c := <-p.Confirms():
		t.Fatalf("a verdict no message asked for: %+v", c)
	case <-time.After(100 * time.Millisecond):
	}
}

// untilClosed reads Confirms until it is closed, passing each verdict to each, and returns the
// last.
func untilClosed(t *testing.T, p Publisher, each func(wire.Confirm)) wire.Confirm {
	t.Helper()
	var last wire.Confirm
	timeout := time.After(wait)
	for {
		select {
		case c, ok := <-p.Confirms():
			if !ok {
				return last
			}
			each(c)
			last = c
		case <-timeout:
			t.Fatalf("Confirms not closed; last %+v", last)
		}
	}
}

// NewMessage returns a message with a new id, of aggregate id aggregate, whose event type (its
// routing key) is eventType.
func NewMessage(eventType, aggregate string) *wire.Message {
	return &wire.Message{
		ID:            uuid.New(),
		AggregateType: "order",
		AggregateID:   aggregate,
		EventType:     eventType,
		Payload:       []byte(`{"total":12.5}`),
		CreatedAt:     time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
	}
}

// String names a kind.
func (k Kind) String() string {
	switch k {
	case Routed:
		return "routed"
	case Nacked:
		return "nacked"
	case Returned:
		return "returned"
	}
	return fmt.Sprintf("kind %d", int(k))
}
