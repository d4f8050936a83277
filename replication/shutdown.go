package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// stopClock is all of a session's shutdown timing.
// When Run's context ends, the stream stops taking new transactions.
// It has Config.ShutdownTimeout, counted from that moment, to finish.
// It reads on to the end of the transaction it is in (finishing), and publishes it.
// It then collects the confirms in flight (draining).
// At the deadline, expiredC closes and publishing ends, which cuts a publish call short.
// The stream then applies the confirms that have arrived and reports the final position.
// What is still unconfirmed is not lost.
// The slot has not moved past it, so the next run sends it again.
//
// Publishing is the context of every publish call; it outlives Run's context by that timeout.
// So a message received just before the end is still published, and its confirm awaited.
// It does not fail the final status update.
type stopClock struct {
	publishing context.Context // ends at the deadline
	end        context.CancelCauseFunc
	expiredC   chan struct{} // closed at the deadline
	expiring   func()        // called at the deadline, on the timer's goroutine
	unwatch    func() bool

	mu       sync.Mutex
	timer    *time.Timer // runs from the end of Run's context to the deadline
	deadline time.Time   // when timer fires; zero if it never started
}

// errShutdownExpired is why publishing ends at the shutdown deadline.
var errShutdownExpired = errors.New("shutdown timeout expired")

// startStopClock starts the clock of a session.
// When ctx ends during the session, stopping is called on a goroutine of its own.
func startStopClock(ctx context.Context, timeout time.Duration, stopping, expiring func()) *stopClock {
	c := &stopClock{expiredC: make(chan struct{}), expiring: expiring}
	c.publishing, c.end = context.WithCancelCause(context.WithoutCancel(ctx))
	c.unwatch = context.AfterFunc(ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.timer == nil {
			c.timer, c.deadline = time.AfterFunc(timeout, c.expire), time.Now().Add(timeout)
			stopping()
		}
	})
	return c
}

// stopping logs the start of a graceful stop with the confirms it waits for. It runs on the stop
// clock's goroutine, so it reads only the stats.
func (s *stream) stopping() {
	s.log.Info("shutdown: waiting for the broker to confirm the messages in flight", "slot", s.cfg.Slot,
		"in_flight", s.stats.InFlight.Load(), "shutdown_timeout", s.cfg.ShutdownTimeout.String())
}

// expiring closes the publisher at the shutdown deadline if a publish call is still in progress.
// The call may be stuck in a socket write, which no context ends.
// The broker then blocks publishing, or answers nothing.
// The call would delay the stop up to the publisher's write timeout.
// Its Close must then cut the connection at once.
// It runs on the stop clock's goroutine.
func (s *stream) expiring() {
	if !s.clock.inCall() {
		return
	}
	msg := "shutdown: a publish is still in progress at the shutdown deadline; cutting the connection"
	if b, ok := s.pub.(blockable); ok && b.Blocked() {
		msg = "shutdown: the broker still blocks publishing at the shutdown deadline; cutting the connection"
	}
	s.log.Warn(msg, "slot", s.cfg.Slot, "shutdown_timeout", s.cfg.ShutdownTimeout.String())
	_ = s.pub.Close()
}

// gaveUp logs the messages still unconfirmed when a graceful stop ends.
// The slot has not passed them, so the next run sends them again.
func (s *stream) gaveUp(err error) {
	if n := s.led.InFlight(); n > 0 || err != nil {
		s.log.Warn("shutdown: gave up waiting for the broker; the next run sends the unconfirmed messages again from the slot",
			"slot", s.cfg.Slot, "unconfirmed", n, "shutdown_timeout", s.cfg.ShutdownTimeout.String(), "error", err)
	}
}

func (c *stopClock) expire() {
	c.end(errShutdownExpired)
	close(c.expiredC)
	c.expiring()
}

// expired reports whether the shutdown deadline has passed.
func (c *stopClock) expired() bool {
	select {
	case <-c.expiredC:
		return true
	default:
		return false
	}
}

// closeGrace is how long a stopping relay waits at least for its publisher to close.
// It waits past its shutdown deadline if need be.
const closeGrace = 500 * time.Millisecond

// closePublisher closes the session's publisher.
// In a graceful stop (ctx ended) it waits for the close only until the shutdown deadline.
// It waits until closeGrace if that is sooner.
// A broker that answers nothing would otherwise delay the exit for the publisher's own close timeout.
// Such a broker is a stopped process, or behind a network partition.
// The close then goes on by itself; whatever it did not confirm stays in the slot.
// The clock is nil if the stream never ran.
func (r *Relay) closePublisher(ctx context.Context, pub Publisher, clock *stopClock) {
	if ctx.Err() == nil {
		_ = pub.Close()
		return
	}
	wait := closeGrace
	if clock != nil {
		wait = max(wait, time.Until(clock.endAt()))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = pub.Close()
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.cfg.Logger.Warn("shutdown: the broker has not answered the close of the connection; exiting without waiting for it",
			"slot", r.cfg.Slot, "waited", wait.Round(time.Millisecond).String())
	}
}

// endAt returns the shutdown deadline, or the zero time if the clock never started.
func (c *stopClock) endAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline
}

// release stops the clock when the session ends.
func (c *stopClock) release() {
	c.unwatch()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer == nil {
		c.timer = time.AfterFunc(0, func() {}) // the clock can no longer start
	}
	c.timer.Stop()
	c.end(context.Canceled)
}

// shutdown ends a graceful stop: it applies the confirms that arrived by the deadline and reports
// the final position.
func (s *stream) shutdown() error {
	err := s.drainConfirms()
	if err == nil && s.led.InFlight() > 0 {
		err = fmt.Errorf("still unconfirmed after %v", s.cfg.ShutdownTimeout)
	}
	s.gaveUp(err)
	return s.finalReport()
}

// finalReport sends the last status update of a graceful stop, through the reporter.
func (s *stream) finalReport() error {
	if err := s.rep.final(); err != nil {
		return err
	}
	s.log.Info("stopped", "slot", s.cfg.Slot, "lsn", s.led.Watermark().String())
	return nil
}

// finalStatus reports the watermark after a broker failure (stream.run).
// It first applies the confirms that had already arrived: a publish that failed or gave up left them unread.
// Applying stops at the first failed confirm it reads.
// The one that ended the session may have been read already, but it stopped the ledger.
// The watermark never passes a failed confirm, so this confirms nothing the broker did not.
// Errors change nothing: the session is over.
func (s *stream) finalStatus() {
	_ = s.drainConfirms()
	_ = s.rep.final()
}
