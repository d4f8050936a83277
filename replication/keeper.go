package replication

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/walbox/walbox/wire"
)

// statusKeeper minds the session while the stream's goroutine is held up in a publish call: one
// the broker blocks (a memory or disk alarm), or one that does not heed its context (the write
// of a large message to a slow broker), can last longer than wal_sender_timeout. Meanwhile the
// keeper
//
//   - sends the status updates that fall due, so that the server keeps the session;
//   - asks a publish that has lasted a whole status interval to give up (one that heeds its
//     context returns, and the stream applies the confirms that arrived before it tries again);
//   - ends the publish call, and the session, as soon as the reader finds the connection gone
//     or the server silent beyond the silence bound, before a standby can take the slot over:
//     a relay that lost its replication connection must not publish any more.
//
// The stream's goroutine owns the connection's writes and the stream's state; it lends them to
// the keeper for the length of each publish call (during) and takes them back before it touches
// either again. The keeper acts only on a timer, set for the next status deadline or the end of
// the call's first status interval, or when the reader fails; what both share is handed over
// under mu. A publish that merely checks a new exchange is never asked to give up: that would cut
// it, session and all.
type statusKeeper struct {
	s      *stream
	mu     sync.Mutex
	armed  bool
	since  time.Time // when the publish call started
	timer  *time.Timer
	ctx    context.Context // the publish calls' context; ends with the stream's publishing
	cancel context.CancelCauseFunc
	err    error // why the connection is taken for gone
}

// errStatusDue is why the keeper ends a publish call's context: the call lasted a status interval.
var errStatusDue = errors.New("publish held up for a status interval")

// during calls send with the keeper armed. It returns send's results, or the keeper's error if
// the connection was found gone meanwhile.
func (k *statusKeeper) during(send func(context.Context) (uint64, error)) (uint64, error) {
	seq, err := send(k.arm())
	if kerr := k.disarm(); kerr != nil {
		return 0, kerr
	}
	return seq, err
}

// waitedOut reports whether err says only that the last publish call gave up when the keeper
// asked it to, with the session still alive and nothing written.
func (k *statusKeeper) waitedOut(err error) bool {
	return err != nil && errors.Is(err, context.Canceled) && context.Cause(k.ctx) == errStatusDue &&
		!errors.Is(err, wire.ErrSessionClosed)
}

func (k *statusKeeper) arm() context.Context {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ctx == nil || context.Cause(k.ctx) == errStatusDue {
		k.ctx, k.cancel = context.WithCancelCause(k.s.stop.publishing)
	}
	k.armed, k.since = true, time.Now()
	wait := k.wait(k.since)
	if k.timer == nil {
		k.timer = time.AfterFunc(wait, k.fire)
	} else {
		k.timer.Reset(wait)
	}
	return k.ctx
}

func (k *statusKeeper) disarm() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.armed = false
	k.timer.Stop()
	err := k.err
	k.err = nil
	return err
}

// wait returns how long from now until the keeper has something to do: the status deadline, or
// the end of the call's first status interval.
func (k *statusKeeper) wait(now time.Time) time.Duration {
	next := k.s.statusDue
	if giveUp := k.since.Add(k.s.cfg.StatusInterval); giveUp.After(now) && giveUp.Before(next) {
		next = giveUp
	}
	return next.Sub(now)
}

// fire runs on the timer's goroutine during a publish call.
func (k *statusKeeper) fire() {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.s
	if !k.armed || k.err != nil {
		return
	}
	now := time.Now()
	if !now.Before(s.statusDue) {
		err := s.checkHeard()
		if err == nil {
			err = s.sendStatus()
		}
		if err != nil {
			k.gone(err)
			return
		}
	}
	if now.Sub(k.since) >= s.cfg.StatusInterval {
		s.stats.Blocked.Store(true)
		k.cancel(errStatusDue)
	}
	k.timer.Reset(k.wait(time.Now())) // on for a call that does not heed its context
}

// busy reports whether a publish call is in progress.
func (k *statusKeeper) busy() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.armed
}

// connFailed is the reader's word that the connection is gone: a publish call in progress ends.
func (k *statusKeeper) connFailed(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.armed && k.err == nil {
		k.gone(err)
	}
}

func (k *statusKeeper) gone(err error) {
	k.err = connGone{err}
	k.cancel(k.err)
}

// stop stops the timer for good; the stream calls it when the session ends.
func (k *statusKeeper) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.armed = false
	if k.timer != nil {
		k.timer.Stop()
	}
	if k.cancel != nil {
		k.cancel(nil)
	}
}

// connGone marks the error of a replication connection found gone during a publish call: the
// session ends on it, and it is no error of the broker's.
type connGone struct{ err error }

func (c connGone) Error() string { return c.err.Error() }
func (c connGone) Unwrap() error { return c.err }

// publishFailed wraps the error of a publish or park as the broker's, unless the replication
// connection failed meanwhile.
func publishFailed(err error) error {
	var g connGone
	if errors.As(err, &g) {
		return g.err
	}
	return brokerError{err}
}
