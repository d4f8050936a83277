package publisher_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/wire"
)

// TestBrokerFaults runs on a node of its own, since it raises alarms on it and kills it.
func TestBrokerFaults(t *testing.T) {
	r := testenv.StartRabbit(t)
	testenv.RequireOwn(t, r)
	t.Run("memory alarm blocks publishing, ctx and Close stay bounded", func(t *testing.T) {
		testBlocked(t, r)
	})
	t.Run("broker killed mid-stream ends the session", func(t *testing.T) {
		testKilled(t, r)
	})
}

const (
	setAlarm   = "rabbit_alarm:set_alarm({{resource_limit, memory, node()}, []})."
	clearAlarm = "rabbit_alarm:clear_alarm({resource_limit, memory, node()})."
)

func testBlocked(t *testing.T, r *testenv.Rabbit) {
	type block struct {
		on     bool
		reason string
	}
	blocks := make(chan block, 16)
	s, exchange := dial(t, r.URL(), publisher.Config{CloseTimeout: 5 * time.Second,
		OnBlocked: func(on bool, reason string) { blocks <- block{on, reason} }})
	bindQueue(t, admin(t, r.URL()), exchange, "#", nil)
	publish(t, s, newMessage("order.created"))
	if c := next(t, s); c.Err != nil {
		t.Fatalf("Confirm before the alarm: %v", c.Err)
	}

	r.Ctl(t, "eval", setAlarm)
	alarmed := true
	t.Cleanup(func() {
		if alarmed {
			r.Ctl(t, "eval", clearAlarm)
		}
	})
	// The broker blocks a connection when it next publishes; this one lands in the socket.
	publish(t, s, newMessage("order.created"))
	waitUntil(t, "Blocked", s.Blocked)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Publish(ctx, newMessage("order.created"))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, publisher.ErrClosed) {
		t.Errorf("Publish while blocked: got %v, want DeadlineExceeded and a live session", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Publish while blocked returned after %v", d)
	}

	r.Ctl(t, "eval", clearAlarm)
	waitUntil(t, "unblocked", func() bool { return !s.Blocked() })
	for _, want := range []block{{true, "low on memory"}, {false, ""}} {
		select {
		case got := <-blocks:
			if got != want {
				t.Errorf("OnBlocked told %+v, want %+v", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("OnBlocked never told %+v", want)
		}
	}
	if c := next(t, s); c.Seq != 2 || c.Err != nil {
		t.Errorf("Confirm of the message sent into the block: got %+v, want seq 2, nil error", c)
	}
	if seq := publish(t, s, newMessage("order.created")); seq != 3 {
		t.Errorf("Publish after the alarm: seq %d, want 3", seq)
	}
	if c := next(t, s); c.Seq != 3 || c.Err != nil {
		t.Errorf("Confirm after the alarm: got %+v, want seq 3, nil error", c)
	}

	r.Ctl(t, "eval", setAlarm)
	publish(t, s, newMessage("order.created"))
	waitUntil(t, "Blocked", s.Blocked)
	start = time.Now()
	err = s.Close()
	t.Logf("Close of a blocked session: %v", err)
	// The broker reads nothing from a blocked connection: Close cuts it rather than wait for
	// the CloseTimeout of 5 s.
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close of a blocked session took %v", d)
	}
	if got := <-blocks; !got.on {
		t.Errorf("OnBlocked told %+v, want the second block", got)
	}
	if got := <-blocks; got != (block{false, "session ended"}) {
		t.Errorf("OnBlocked told %+v at Close, want the end of the block with the session", got)
	}
	r.Ctl(t, "eval", clearAlarm)
	alarmed = false
}

func testKilled(t *testing.T, r *testenv.Rabbit) {
	s, exchange := dial(t, r.URL(), publisher.Config{Window: 128})
	bindQueue(t, admin(t, r.URL()), exchange, "#", nil)

	published := make(chan error, 1)
	go func() {
		for {
			if _, err := s.Publish(context.Background(), newMessage("order.created")); err != nil {
				published <- err
				return
			}
		}
	}()
	for i := uint64(1); i <= 200; i++ {
		if c := next(t, s); c.Seq != i || c.Err != nil {
			t.Fatalf("Confirm: got %+v, want seq %d, nil error", c, i)
		}
	}
	r.Kill(t)

	want := uint64(201)
	last := untilClosedFunc(t, s, func(seq uint64) {
		if seq != want {
			t.Errorf("Confirm after the kill: seq %d, want %d", seq, want)
		}
		want++
	})
	if last.Seq != 0 || !errors.Is(last.Err, publisher.ErrClosed) {
		t.Errorf("last Confirm: got %+v, want Seq 0 and ErrClosed", last)
	}
	t.Logf("last Confirm: %v", last.Err)
	select {
	case err := <-published:
		if !errors.Is(err, publisher.ErrClosed) {
			t.Errorf("Publish after the kill: got %v, want ErrClosed", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Publish hangs after the kill")
	}
}

// untilClosedFunc reads Confirms until it is closed, passing each verdict's seq to f, and
// returns the last Confirm.
func untilClosedFunc(tb testing.TB, s *publisher.Session, f func(seq uint64)) (last wire.Confirm) {
	tb.Helper()
	timeout := time.After(waitFor)
	for {
		select {
		case c, ok := <-s.Confirms():
			if !ok {
				return last
			}
			if c.Seq != 0 {
				f(c.Seq)
			}
			last = c
		case <-timeout:
			tb.Fatalf("Confirms not closed; last %+v", last)
		}
	}
}

func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("not %s after %v", what, waitFor)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
