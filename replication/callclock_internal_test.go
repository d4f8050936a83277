package replication

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestCallClockEndsOnlyACallThatLastsTheInterval(t *testing.T) {
	parent, end := context.WithCancelCause(context.Background())
	defer end(nil)
	c := newCallClock(parent, 50*time.Millisecond)
	defer c.close()

	// Short calls, one after another for longer than the interval, share one live context.
	first := c.start()
	c.done()
	for range 10 {
		ctx := c.start()
		time.Sleep(10 * time.Millisecond)
		if ctx != first {
			t.Fatal("a short call got a new context: one is made for every call")
		}
		if err := ctx.Err(); err != nil {
			t.Fatalf("a call of 10 ms ended: %v (cause %v)", err, context.Cause(ctx))
		}
		c.done()
	}

	// A call that lasts the interval has its context ended, with errStatusDue.
	ctx := c.start()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a call held up past the interval was not ended")
	}
	if cause := context.Cause(ctx); !errors.Is(cause, errStatusDue) {
		t.Fatalf("cause %v, want errStatusDue", cause)
	}
	c.done()

	// The next call gets a live context again.
	next := c.start()
	if next.Err() != nil {
		t.Fatal("the call after an ended one starts with an ended context")
	}
	c.done()

	// The session's end ends the call's context, with the session's cause.
	gone := errors.New("connection gone")
	ctx = c.start()
	end(gone)
	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, gone) {
		t.Fatalf("cause %v, want the session's", cause)
	}
	c.done()
}

// A timer firing for an earlier call, late, must not end a call that just started.
func TestCallClockIgnoresAFiringForAnEarlierCall(t *testing.T) {
	c := newCallClock(context.Background(), time.Hour)
	defer c.close()
	ctx := c.start()
	c.done()
	ctx2 := c.start()
	c.due() // as if the first call's timer fired now
	if ctx2.Err() != nil || ctx.Err() != nil {
		t.Fatal("a firing meant for an earlier call ended a call that had just started")
	}
	c.started = time.Now().Add(-2 * time.Hour) // the call has now lasted the interval
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
