package replication

import (
	"context"
	"errors"
	"testing"
	"time"
)

func newCallClock(parent context.Context, interval time.Duration) *callClock {
	c := &callClock{}
	c.begin(parent, interval)
	return c
}

func TestCallClockEndsOnlyACallThatLastsTheInterval(t *testing.T) {
	parent, end := context.WithCancelCause(context.Background())
	defer end(nil)
	c := newCallClock(parent, time.Second)
	defer c.close()

	// Short calls, one after another for longer than the interval, share one live context.
	first := c.start()
	c.done()
	for range 15 {
		ctx := c.start()
		time.Sleep(100 * time.Millisecond)
		if ctx != first {
			t.Fatal("a short call got a new context: one is made for every call")
		}
		if err := ctx.Err(); err != nil {
			t.Fatalf("a call of 100 ms ended: %v (cause %v)", err, context.Cause(ctx))
		}
		c.done()
	}

	// A call that lasts the interval has its context ended as by a deadline, with errStatusDue.
	ctx := c.start()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a call blocked past the interval was not ended")
	}
	if cause := context.Cause(ctx); !errors.Is(cause, errStatusDue) {
		t.Fatalf("cause %v, want errStatusDue", cause)
	}
	if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err %v, want context.DeadlineExceeded: a publisher's error would read as a stop", err)
	}
	c.done()

	// The next call gets a live context again.
	next := c.start()
	if next.Err() != nil {
		t.Fatal("the call after an ended one starts with an ended context")
	}
	c.done()

	// The session's end ends the call's context, with the session's cause, as a cancel.
	gone := errors.New("connection gone")
	ctx = c.start()
	end(gone)
	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, gone) {
		t.Fatalf("cause %v, want the session's", cause)
	}
	if err := ctx.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err %v, want context.Canceled", err)
	}
	c.done()
}

// A timer firing late for an earlier call must not end a call that just started.
// That is so even for a call that shares the earlier call's context.
func TestCallClockIgnoresAFiringForAnEarlierCall(t *testing.T) {
	c := newCallClock(context.Background(), time.Hour)
	defer c.close()
	ctx := c.start()
	c.started = time.Now().Add(-2 * time.Hour) // the first call lasted the interval...
	c.done()                                   // ...and ended just before its timer fired
	ctx2 := c.start()
	if ctx2 != ctx {
		t.Fatal("the second call did not share the first one's live context")
	}
	c.due() // the first call's firing, late
	if ctx2.Err() != nil {
		t.Fatal("a firing meant for an earlier call ended a call that had just started")
	}
	c.started = time.Now().Add(-2 * time.Hour) // the call in progress has now lasted the interval
	c.due()
	if !errors.Is(context.Cause(ctx2), errStatusDue) {
		t.Fatal("the firing for the call in progress did not end it")
	}
	c.done()
}

func TestCallClockMakesNothingPerCall(t *testing.T) {
	c := newCallClock(context.Background(), time.Hour)
	defer c.close()
	c.start()
	c.done()
	if n := testing.AllocsPerRun(1000, func() {
		c.start()
		c.done()
	}); n != 0 {
		t.Fatalf("%v allocations a call, want none", n)
	}
}
