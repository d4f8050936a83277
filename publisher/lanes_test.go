package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/wire"
)

// dialLanes opens n lanes on a fresh exchange, whose name it returns; Close is registered as
// cleanup.
func dialLanes(t *testing.T, url string, n int, cfg publisher.Config) (*publisher.Lanes, string) {
	t.Helper()
	cfg.URL = url
	cfg.Exchange = testenv.UniqueName("outbox")
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	l, err := publisher.DialLanes(ctx, n, func(ctx context.Context) (*publisher.Session, error) {
		return publisher.Dial(ctx, cfg)
	})
	if err != nil {
		t.Fatalf("DialLanes: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l, cfg.Exchange
}

// Lanes number messages 1, 2, 3, ... in the order of the calls, confirm each exactly once under
// that number, spread the aggregates over every lane, and keep each aggregate's order on the way
// to the queue.
func TestLanesNumberAndOrder(t *testing.T) {
	r := testenv.SharedRabbit(t)
	l, exchange := dialLanes(t, r.URL(), 3, publisher.Config{Window: 64})
	ch := admin(t, r.URL())
	q := bindQueue(t, ch, exchange, "#", nil)

	const n, aggregates = 3000, 40
	used := map[int]bool{}
	for a := range aggregates {
		used[publisher.LaneOf(strconv.Itoa(a), 3)] = true
	}
	if len(used) != 3 {
		t.Fatalf("%d aggregates use lanes %v; want all three", aggregates, used)
	}
	errc := make(chan error, 1)
	go func() {
		for i := range n {
			m := newMessage("order.created")
			m.AggregateID = strconv.Itoa(i % aggregates)
			m.Payload = []byte(fmt.Sprintf(`{"n":%d}`, i))
			seq, err := l.Publish(context.Background(), m)
			if err != nil || seq != uint64(i+1) {
				errc <- fmt.Errorf("Publish %d: seq %d, %v; want seq %d", i, seq, err, i+1)
				return
			}
		}
		errc <- nil
	}()
	seen := make([]bool, n+1)
	deadline := time.After(time.Minute)
	for range n {
		select {
		case c, ok := <-l.Confirms():
			if !ok || c.Err != nil || c.Seq == 0 || c.Seq > n || seen[c.Seq] {
				t.Fatalf("confirm %+v (open %v): want a new sequence in 1..%d without error", c, ok, n)
			}
			seen[c.Seq] = true
		case <-deadline:
			t.Fatal("confirms did not all arrive within a minute")
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}

	last := map[string]int{}
	for range n {
		d := get(t, ch, q)
		var i int
		if _, err := fmt.Sscanf(string(d.Body), `{"n":%d}`, &i); err != nil {
			t.Fatalf("body %q: %v", d.Body, err)
		}
		agg := d.Headers["aggregate_id"].(string)
		if prev, ok := last[agg]; ok && i < prev {
			t.Fatalf("aggregate %s: message %d after %d", agg, i, prev)
		}
		last[agg] = i
	}
}

// The verdict on a refused message carries its lanes number, and the other lanes go on.
func TestLanesRefusalIsNumbered(t *testing.T) {
	r := testenv.SharedRabbit(t)
	l, exchange := dialLanes(t, r.URL(), 2, publisher.Config{})
	ch := admin(t, r.URL())
	bindQueue(t, ch, exchange, "ok", nil)
	bindQueue(t, ch, exchange, "full", amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"})

	// Aggregates on different lanes: "a" refused, "b" fine.
	a, b := "1", "2"
	for publisher.LaneOf(a, 2) == publisher.LaneOf(b, 2) {
		b += "x"
	}
	msg := func(agg, key string) *wire.Message {
		m := newMessage(key)
		m.AggregateID = agg
		return m
	}
	for _, m := range []*wire.Message{msg(b, "ok"), msg(a, "full"), msg(b, "ok")} {
		if _, err := l.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	verdicts := map[uint64]error{}
	for range 3 {
		select {
		case c := <-l.Confirms():
			verdicts[c.Seq] = c.Err
		case <-time.After(waitFor):
			t.Fatalf("verdicts so far %v; want three", verdicts)
		}
	}
	if verdicts[1] != nil || verdicts[3] != nil || verdicts[2] == nil {
		t.Fatalf("verdicts %v; want 2 refused, 1 and 3 confirmed", verdicts)
	}
}

// One lane's connection lost ends every lane: the failure is reported with sequence 0, Confirms
// closes, and Publish fails with ErrClosed.
func TestLanesEndTogether(t *testing.T) {
	r := testenv.SharedRabbit(t)
	l, exchange := dialLanes(t, r.URL(), 3, publisher.Config{})
	bindQueue(t, admin(t, r.URL()), exchange, "#", nil)
	if _, err := l.Publish(context.Background(), newMessage("order.created")); err != nil {
		t.Fatal(err)
	}
	l.Sessions()[1].Close()
	var failed bool
	timeout := time.After(waitFor)
	for done := false; !done; {
		select {
		case c, ok := <-l.Confirms():
			if !ok {
				done = true
			} else if c.Seq == 0 && c.Err != nil {
				failed = true
			}
		case <-timeout:
			t.Fatal("Confirms did not close after a lane ended")
		}
	}
	if !failed {
		t.Error("no failure reported with sequence 0 before Confirms closed")
	}
	if _, err := l.Publish(context.Background(), newMessage("order.created")); !errors.Is(err, publisher.ErrClosed) {
		t.Errorf("Publish after a lane ended: %v, want ErrClosed", err)
	}
	for i, s := range l.Sessions() {
		if s.Err() == nil {
			t.Errorf("lane %d is still open", i)
		}
	}
}
