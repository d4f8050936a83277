package replication

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// callClock gives each publish call its context: the session's (gone).
// Once one call has lasted the interval, the clock ends it with errStatusDue, as a deadline.
// Its Err is then context.DeadlineExceeded, as for context.WithTimeoutCause.
// So a publisher's error says "deadline", not "canceled", which reads as a stop.
// One context serves call after call until it ends, and one timer is re-armed at each call.
// A context and a timer for every message would cost the drain about 0.7 µs and 272 bytes a message.
//
// Its zero value is ready once begin has set the parent and the interval.
type callClock struct {
	running atomic.Bool // a call is in progress; read without mu (stream.expiring)

	mu       sync.Mutex
	parent   context.Context
	interval time.Duration
	ctx      context.Context // a callCtx
	cancel   context.CancelCauseFunc
	timer    *time.Timer
	started  time.Time // when the call in progress started
}

// begin sets the context calls derive from and how long one may last.
func (c *callClock) begin(parent context.Context, interval time.Duration) {
	c.mu.Lock()
	c.parent, c.interval = parent, interval
	c.mu.Unlock()
}

// inCall reports whether a call is in progress.
func (c *callClock) inCall() bool { return c.running.Load() }

// start begins a call and returns its context.
func (c *callClock) start() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil || c.ctx.Err() != nil {
		ctx, cancel := context.WithCancelCause(c.parent)
		c.ctx, c.cancel = callCtx{ctx}, cancel
	}
	c.started = time.Now()
	c.running.Store(true)
	if c.timer == nil {
		c.timer = time.AfterFunc(c.interval, c.due)
	} else {
		c.timer.Reset(c.interval)
	}
	return c.ctx
}

// done ends the call start began.
func (c *callClock) done() { c.running.Store(false) }

// due ends the context if the call in progress has lasted the interval.
// A timer never fires early.
// So a late firing meant for an earlier call finds a later call too young.
func (c *callClock) due() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running.Load() && time.Since(c.started) >= c.interval {
		c.cancel(errStatusDue)
	}
}

// close stops the timer and ends the context.
func (c *callClock) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.cancel != nil {
		c.cancel(nil)
	}
}

// callCtx is a cancelable context whose Err is context.DeadlineExceeded when the clock ended it.
// Done, Value (and so context.Cause) are the embedded context's.
type callCtx struct{ context.Context }

func (c callCtx) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == errStatusDue {
		return context.DeadlineExceeded
	}
	return err
}
