package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// stopClock is all of a session's shutdown timing. When Run's context ends, the stream stops
// taking new transactions but has Config.ShutdownTimeout, counted from that moment, to read on
// to the end of the transaction it is in (finishing), to publish it, and to collect the confirms
// in flight (draining). At the deadline expired closes and publishing ends, which cuts a publish
// call short; the stream then applies the confirms that have arrived and reports the final
// position. What is still unconfirmed is not lost: the slot has not moved past it, so the next run
// sends it again.
//
// Publishing, the context of every publish call, outlives Run's context by that timeout for this
// reason: a message received just before the end is still published, and its confirm awaited,
// rather than failing the final status update.
type stopClock struct {
	publishing context.Context // ends at the deadline
	end        context.CancelCauseFunc
	expiredC   chan struct{} // closed at the deadline
	unwatch    func() bool

	mu    sync.Mutex
	timer *time.Timer // runs from the end of Run's context to the deadline
}

// errShutdownExpired is why publishing ends at the shutdown deadline.
var errShutdownExpired = errors.New("shutdown timeout expired")

func startStopClock(ctx context.Context, timeout time.Duration) *stopClock {
	c := &stopClock{expiredC: make(chan struct{})}
	c.publishing, c.end = context.WithCancelCause(context.WithoutCancel(ctx))
	c.unwatch = context.AfterFunc(ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.timer == nil {
			c.timer = time.AfterFunc(timeout, c.expire)
		}
	})
	return c
}

func (c *stopClock) expire() {
	c.end(errShutdownExpired)
	close(c.expiredC)
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
	if err == nil && s.track.InFlight() > 0 {
		err = fmt.Errorf("still unconfirmed after %v", s.cfg.ShutdownTimeout)
	}
	if err != nil {
		s.log.Warn("shutdown: messages will be sent again on the next run", "slot", s.cfg.Slot,
			"unconfirmed", s.track.InFlight(), "error", err)
	}
	return s.finalReport()
}

// finalReport sends the last status update of a graceful stop.
func (s *stream) finalReport() error {
	if err := s.sendStatus(); err != nil {
		return err
	}
	s.log.Info("stopped", "slot", s.cfg.Slot, "lsn", s.track.Watermark().String())
	return nil
}

// finalStatus reports the watermark after a broker failure, having first applied the confirms
// that had already arrived: a publish that failed or gave up left them unread. Applying stops at
// the first failed confirm it reads; the one that ended the session may have been read already,
// but it froze the tracker, and the watermark never passes a failed confirm, so this confirms
// nothing the broker did not. Errors change nothing: the session is over.
func (s *stream) finalStatus() {
	_ = s.drainConfirms()
	_ = s.sendStatus()
}
