package replication

import (
	"context"
	"sync"
	"time"
)

// statusKeeper sends the status updates that fall due while the stream's goroutine is held up in
// a publish call that does not heed its context: the write of a large message to a slow broker
// can take longer than wal_sender_timeout, and the server would drop the session, every time
// the message is sent again.
//
// The stream's goroutine owns the replication connection; it lends it to the keeper for the
// length of the call (arm), and takes it back (disarm) before it touches the connection or the
// stream again. The keeper uses the connection only while armed, and only under mu, so the two
// never use it at once, and each sees what the other did.
type statusKeeper struct {
	s     *stream
	mu    sync.Mutex
	armed bool
	timer *time.Timer
	err   error // the first failed status update while armed
}

// during calls send(ctx) with the keeper armed, and returns its results, or the keeper's error
// if a status update failed meanwhile (the connection is gone: the session ends).
func (k *statusKeeper) during(ctx context.Context, send func(context.Context) (uint64, error)) (uint64, error) {
	k.arm()
	seq, err := send(ctx)
	if kerr := k.disarm(); kerr != nil && err == nil {
		return seq, kerr
	}
	return seq, err
}

func (k *statusKeeper) arm() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.armed = true
	if k.timer == nil {
		k.timer = time.AfterFunc(time.Until(k.s.nextMsg), k.fire)
		return
	}
	k.timer.Reset(time.Until(k.s.nextMsg))
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

// fire sends the status update that is due, and waits for the next one, while armed.
func (k *statusKeeper) fire() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.armed || k.err != nil {
		return
	}
	if wait := time.Until(k.s.nextMsg); wait > 0 {
		k.timer.Reset(wait) // a firing from an earlier call, or the status went out meanwhile
		return
	}
	if k.err = k.s.sendStatus(); k.err == nil {
		k.timer.Reset(time.Until(k.s.nextMsg))
	}
}

// stop stops the timer for good; the stream calls it when the session ends.
func (k *statusKeeper) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.armed = false
	if k.timer != nil {
		k.timer.Stop()
	}
}
