package publisher_test

import (
	"context"
	"errors"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/wire"
)

func TestPublishedMessageProperties(t *testing.T) {
	r := testenv.SharedRabbit(t)
	s, exchange := dial(t, r.URL(), publisher.Config{})
	ch := admin(t, r.URL())
	q := bindQueue(t, ch, exchange, "order.#", nil)

	m := newMessage("order.created")
	m.CreatedAt = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	m.Headers = map[string]any{
		"traceparent": traceparent,
		"n":           12.5,
		"b":           true,
		"none":        nil,
		"list":        []any{"a", 1.0},
		"obj":         map[string]any{"k": "v"},
	}
	seq := publish(t, s, m)
	if c := next(t, s); c.Seq != seq || c.Err != nil {
		t.Fatalf("Confirm: got %+v, want seq %d, nil error", c, seq)
	}

	d := get(t, ch, q)
	checks := []struct {
		name      string
		got, want any
	}{
		{"exchange", d.Exchange, exchange},
		{"routing key", d.RoutingKey, "order.created"},
		{"message id", d.MessageId, m.ID.String()},
		{"type", d.Type, "order.created"},
		{"content type", d.ContentType, "application/json"},
		{"delivery mode", d.DeliveryMode, uint8(2)},
		{"timestamp", d.Timestamp.UTC(), m.CreatedAt},
		{"app id", d.AppId, "walbox"},
		{"body", string(d.Body), string(m.Payload)},
		{"headers", d.Headers, amqp.Table{
			"aggregate_type": "order",
			"aggregate_id":   "42",
			"traceparent":    traceparent,
			"n":              12.5,
			"b":              true,
			"none":           nil,
			"list":           []any{"a", 1.0},
			"obj":            amqp.Table{"k": "v"},
		}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %#v, want %#v", c.name, c.got, c.want)
		}
	}
}

func TestPipelinedConfirmsInOrder(t *testing.T) {
	r := testenv.SharedRabbit(t)
	s, exchange := dial(t, r.URL(), publisher.Config{Window: 256})
	bindQueue(t, admin(t, r.URL()), exchange, "#", nil)

	const n = 1000
	go func() {
		for i := uint64(1); i <= n; i++ {
			seq, err := s.Publish(context.Background(), newMessage("order.created"))
			if err != nil || seq != i {
				t.Errorf("Publish: got seq %d, %v; want %d", seq, err, i)
				return
			}
		}
	}()
	for i := uint64(1); i <= n; i++ {
		if c := next(t, s); c.Seq != i || c.Err != nil {
			t.Fatalf("Confirm: got %+v, want seq %d, nil error", c, i)
		}
	}
}

func TestUnroutableMessageIsReturned(t *testing.T) {
	r := testenv.SharedRabbit(t)
	s, exchange := dial(t, r.URL(), publisher.Config{Window: 64, AlternateExchange: publisher.NoExchange})
	bindQueue(t, admin(t, r.URL()), exchange, "routed.#", nil)

	// Routed and unroutable messages interleaved and pipelined: the broker acks an unroutable
	// message at once and a routed one once its queue has it, so acks come out of order.
	const n = 600
	ids := make([]string, n+1) // by seq
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := 1; i <= n; i++ {
			key := "routed.x"
			if i%3 == 0 {
				key = "nowhere"
			}
			m := newMessage(key)
			if _, err := s.Publish(context.Background(), m); err != nil {
				t.Errorf("Publish: %v", err)
				return
			}
			ids[i] = m.ID.String()
		}
	}()
	confirms := make([]wire.Confirm, 0, n)
	for range n {
		confirms = append(confirms, next(t, s))
	}
	<-published
	for i, c := range confirms {
		seq := uint64(i + 1)
		if c.Seq != seq {
			t.Fatalf("Confirm: got seq %d, want %d", c.Seq, seq)
		}
		if seq%3 != 0 {
			if c.Err != nil {
				t.Errorf("Confirm %d of a routed message: %v", seq, c.Err)
			}
			continue
		}
		var re *publisher.ReturnError
		switch {
		case !errors.As(c.Err, &re) || !errors.Is(c.Err, publisher.ErrReturned):
			t.Errorf("Confirm %d of an unroutable message: got %v, want a ReturnError", seq, c.Err)
		case re.Code != amqp.NoRoute || re.MessageID != ids[seq]:
			t.Errorf("Confirm %d: got %+v, want code %d and id %s", seq, re, amqp.NoRoute, ids[seq])
		}
	}
}

func TestRejectedMessageIsNacked(t *testing.T) {
	r := testenv.SharedRabbit(t)
	s, exchange := dial(t, r.URL(), publisher.Config{})
	bindQueue(t, admin(t, r.URL()), exchange, "#", amqp.Table{"x-max-length": int64(1), "x-overflow": "reject-publish"})

	for i := uint64(1); i <= 3; i++ {
		publish(t, s, newMessage("order.created"))
		c := next(t, s)
		switch {
		case c.Seq != i:
			t.Fatalf("Confirm: got seq %d, want %d", c.Seq, i)
		case i == 1 && c.Err != nil:
			t.Errorf("Confirm 1: %v, want nil", c.Err)
		case i > 1 && !errors.Is(c.Err, publisher.ErrNacked):
			t.Errorf("Confirm %d: got %v, want ErrNacked", i, c.Err)
		}
	}
}

func TestChannelErrorEndsSession(t *testing.T) {
	r := testenv.SharedRabbit(t)
	s, exchange := dial(t, r.URL(), publisher.Config{})
	if err := admin(t, r.URL()).ExchangeDelete(exchange, false, false); err != nil {
		t.Fatal(err)
	}
	publish(t, s, newMessage("order.created")) // the broker answers with channel.close 404

	last := untilClosed(t, s)
	var amqpErr *amqp.Error
	if last.Seq != 0 || !errors.Is(last.Err, publisher.ErrClosed) || !errors.As(last.Err, &amqpErr) || amqpErr.Code != amqp.NotFound {
		t.Fatalf("last Confirm: got %+v, want Seq 0 and ErrClosed wrapping a 404", last)
	}
	if _, err := s.Publish(context.Background(), newMessage("order.created")); !errors.Is(err, publisher.ErrClosed) {
		t.Errorf("Publish after the end: got %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	r := testenv.SharedRabbit(t)
	admin(t, r.URL()) // its goroutines belong to the baseline
	base := runtime.NumGoroutine()

	s, _ := dial(t, r.URL(), publisher.Config{})
	publish(t, s, newMessage("order.created"))
	next(t, s)
	publish(t, s, newMessage("order.created")) // its Confirm may be dropped by Close
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	last := untilClosed(t, s)
	if last.Seq == 0 && !errors.Is(last.Err, publisher.ErrClosed) {
		t.Errorf("last Confirm: got %+v, want a verdict or ErrClosed", last)
	}
	if _, err := s.Publish(context.Background(), newMessage("order.created")); !errors.Is(err, publisher.ErrClosed) {
		t.Errorf("Publish after Close: got %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	checkGoroutines(t, base)
}

func TestDialErrorHidesPassword(t *testing.T) {
	r := testenv.SharedRabbit(t)
	const secret = "wr0ng-s3cr3t"
	u, err := amqp.ParseURI(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.Password = secret
	base := runtime.NumGoroutine()
	_, err = publisher.Dial(context.Background(), publisher.Config{URL: u.String()})
	if err == nil {
		t.Fatal("Dial with a wrong password: no error")
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("Dial error shows the password: %v", err)
	}
	checkGoroutines(t, base)
}

func TestDialHonoursContext(t *testing.T) {
	r := testenv.SharedRabbit(t)
	p, url := startProxy(t, r.URL())
	p.down.pause() // the broker's handshake never arrives
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := publisher.Dial(ctx, publisher.Config{URL: url})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Dial: got %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Dial took %v", d)
	}
}

// TestPublishDoesNotCountWhatIsInFlight checks that the session keeps no window of its own:
// with no confirm reaching it, Publish goes on past Config.Window (the caller bounds what it has
// in flight), and every message gets its verdict, in order, once confirms flow again.
func TestPublishDoesNotCountWhatIsInFlight(t *testing.T) {
	r := testenv.SharedRabbit(t)
	p, url := startProxy(t, r.URL())
	s, exchange := dial(t, url, publisher.Config{Window: 4})
	bindQueue(t, admin(t, r.URL()), exchange, "#", nil)

	p.down.pause() // no confirms reach the session
	for i := uint64(1); i <= 12; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		seq, err := s.Publish(ctx, newMessage("order.created"))
		cancel()
		if err != nil || seq != i {
			t.Fatalf("Publish %d with %d unconfirmed: seq %d, %v", i, i-1, seq, err)
		}
	}
	p.down.resume()
	for i := uint64(1); i <= 12; i++ {
		if c := next(t, s); c.Seq != i || c.Err != nil {
			t.Errorf("Confirm: got %+v, want seq %d, nil error", c, i)
		}
	}
}

// TestStuckWriteIsCut covers a broker that stops reading without telling (amqp091-go#111):
// Publish blocks in a socket write that ignores ctx, so the session cuts the connection after
// WriteTimeout, and Close stays bounded. The caller's ctx does not cut a write: a deadline that
// falls during a brief stall must not end the session.
func TestStuckWriteIsCut(t *testing.T) {
	r := testenv.SharedRabbit(t)
	p, url := startProxy(t, r.URL())
	s, _ := dial(t, url, publisher.Config{CloseTimeout: time.Second, WriteTimeout: 2 * time.Second})
	p.up.pause()

	m := newMessage("order.created")
	m.Payload = make([]byte, 1<<20)
	var err error
	start := time.Now()
	var published int
	for ; err == nil && published < 1000; published++ {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err = s.Publish(ctx, m)
		cancel()
	}
	if !errors.Is(err, publisher.ErrClosed) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Publish into a stalled socket: got %v, want ErrClosed and os.ErrDeadlineExceeded", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Publish into a stalled socket: got %v; the caller's deadline cut the write", err)
	}
	if d := time.Since(start); d < 2*time.Second || d > 12*time.Second {
		t.Errorf("Publish returned after %v, want about the 2s write timeout", d)
	}
	last := untilClosed(t, s)
	if !errors.Is(last.Err, publisher.ErrClosed) {
		t.Errorf("last Confirm: got %+v, want ErrClosed", last)
	}
	start = time.Now()
	s.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v", d)
	}
}

// TestCloseWhilePublishStuck closes the session from another goroutine while Publish is stuck
// in a socket write with no deadline.
func TestCloseWhilePublishStuck(t *testing.T) {
	r := testenv.SharedRabbit(t)
	p, url := startProxy(t, r.URL())
	s, _ := dial(t, url, publisher.Config{CloseTimeout: time.Second})
	p.up.pause()

	errc := make(chan error, 1)
	go func() {
		m := newMessage("order.created")
		m.Payload = make([]byte, 1<<20)
		for {
			if _, err := s.Publish(context.Background(), m); err != nil {
				errc <- err
				return
			}
		}
	}()
	time.Sleep(500 * time.Millisecond) // let the socket buffers fill up
	start := time.Now()
	s.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v", d)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, publisher.ErrClosed) {
			t.Errorf("Publish: got %v, want ErrClosed", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Publish still stuck after Close")
	}
}

func get(tb testing.TB, ch *amqp.Channel, queue string) amqp.Delivery {
	tb.Helper()
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			tb.Fatalf("get: %v", err)
		}
		if ok {
			return d
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("no message in %s", queue)
	return amqp.Delivery{}
}

func TestInvalidMessageLeavesSessionUsable(t *testing.T) {
	r := testenv.SharedRabbit(t)
	s, exchange := dial(t, r.URL(), publisher.Config{})
	bindQueue(t, admin(t, r.URL()), exchange, "#", nil)

	long := newMessage(strings.Repeat("x", 256))
	badHeader := newMessage("order.created")
	badHeader.Headers = map[string]any{"nested": map[string]any{strings.Repeat("k", 256): 1.0}}
	longKey := newMessage("order.created")
	longKey.RoutingKey = strings.Repeat("k", 256)
	longID := newMessage("order.created")
	longID.MessageID = strings.Repeat("1", 256)
	longExchange := newMessage("order.created")
	longExchange.Exchange = strings.Repeat("e", 256)
	// A content header frame over the broker's frame_max (128 KiB) would make it close the
	// connection: amqp091 sends the properties in one frame.
	hugeHeader := newMessage("order.created")
	hugeHeader.Headers = map[string]any{"blob": strings.Repeat("h", 200<<10)}
	hugeAggregate := newMessage("order.created")
	hugeAggregate.AggregateID = strings.Repeat("a", 140<<10)
	for _, m := range []*wire.Message{nil, long, badHeader, longKey, longID, longExchange, hugeHeader, hugeAggregate} {
		if _, err := s.Publish(context.Background(), m); !errors.Is(err, publisher.ErrInvalidMessage) {
			t.Errorf("Publish: got %v, want ErrInvalidMessage", err)
		}
	}
	if seq := publish(t, s, newMessage("order.created")); seq != 1 {
		t.Errorf("Publish after invalid messages: seq %d, want 1", seq)
	}
	if c := next(t, s); c.Seq != 1 || c.Err != nil {
		t.Errorf("Confirm: got %+v, want seq 1, nil error", c)
	}
	// Large headers that do fit in a frame still go through.
	big := newMessage("order.created")
	big.Headers = map[string]any{"blob": strings.Repeat("h", 100<<10)}
	if seq := publish(t, s, big); seq != 2 {
		t.Errorf("Publish with 100 KiB of headers: seq %d, want 2", seq)
	}
	if c := next(t, s); c.Seq != 2 || c.Err != nil {
		t.Errorf("Confirm: got %+v, want seq 2, nil error", c)
	}
}
