package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// statusKeeper minds the replication connection while the stream's goroutine is held up in a
// publish call: one the broker blocks (a memory or disk alarm), or one that does not heed its
// context (the write of a large message to a slow broker), can last longer than
// wal_sender_timeout. Meanwhile the keeper
//
//   - sends the status updates that fall due, so that the server keeps the session;
//   - reads what the server sends, keeping it in order for the stream (the backlog), so that
//     the connection's end is seen at once: an error, the stream's end, or a silence beyond the
//     silence bound ends the publish call, and the session, before a standby can take the slot
//     over. A relay that lost its replication connection must not publish any more.
//
// The stream's goroutine owns the connection; it lends it to the keeper for the length of each
// publish call (during), and takes it back before it touches the connection or the stream
// again. The keeper starts on a timer, only for a call that lasts a tenth of a status interval,
// and uses the connection only while armed; what both share is handed over under mu.
type statusKeeper struct {
	s       *stream
	mu      sync.Mutex
	stopped *sync.Cond // signalled when the reader stops
	armed   bool
	reading bool
	timer   *time.Timer
	cancel  context.CancelFunc // ends the publish call
	err     error              // why the connection is taken for gone
}

// maxBacklog bounds the messages the keeper holds for the stream; beyond it the keeper stops
// reading until the publish call returns.
const maxBacklog = 4096

// during calls send(ctx) with the keeper armed; cancel ends ctx. It returns send's results, or
// the keeper's error if the connection was found gone meanwhile.
func (k *statusKeeper) during(ctx context.Context, cancel context.CancelFunc, send func(context.Context) (uint64, error)) (uint64, error) {
	k.arm(cancel)
	seq, err := send(ctx)
	if kerr := k.disarm(); kerr != nil {
		return 0, kerr
	}
	return seq, err
}

func (k *statusKeeper) arm(cancel context.CancelFunc) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.armed, k.cancel = true, cancel
	wait := min(time.Until(k.s.statusDue), k.s.cfg.StatusInterval/10)
	if k.timer == nil {
		k.stopped = sync.NewCond(&k.mu)
		k.timer = time.AfterFunc(wait, k.mind)
		return
	}
	k.timer.Reset(wait)
}

func (k *statusKeeper) disarm() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.armed = false
	k.timer.Stop()
	if k.reading {
		_ = k.s.conn.Conn().SetReadDeadline(time.Now()) // wake the reader
		for k.reading {
			k.stopped.Wait()
		}
	}
	err := k.err
	k.err, k.cancel = nil, nil
	return err
}

// mind runs on the timer's goroutine while a publish call lasts: it reads from the server and
// sends the status updates due, until disarmed or the connection is found gone.
func (k *statusKeeper) mind() {
	k.mu.Lock()
	if !k.armed || k.reading || k.err != nil {
		k.mu.Unlock()
		return
	}
	k.reading = true
	defer func() {
		k.reading = false
		k.stopped.Broadcast()
		k.mu.Unlock()
	}()
	for k.armed {
		if err := k.step(); err != nil {
			k.err = connGone{err}
			k.cancel()
			return
		}
	}
}

// step sends the status update if due, then waits, with mu released, for the server until the
// next one is due or disarm wakes it. Called and returning with mu held.
func (k *statusKeeper) step() error {
	s := k.s
	if !time.Now().Before(s.statusDue) {
		if err := s.sendStatus(); err != nil {
			return err
		}
	}
	if len(s.backlog) >= maxBacklog {
		// No room: stop reading, and keep the session until the publish call returns.
		k.mu.Unlock()
		time.Sleep(time.Until(s.statusDue))
		k.mu.Lock()
		return nil
	}
	// Set under mu, so that disarm's wake-up cannot come first and be overwritten.
	if err := s.conn.Conn().SetReadDeadline(s.statusDue); err != nil {
		return fmt.Errorf("keep the session: set read deadline: %w", err)
	}
	k.mu.Unlock()
	msg, err := s.conn.ReceiveMessage(context.Background())
	k.mu.Lock()
	if err != nil {
		if pgconn.Timeout(err) {
			return s.checkHeard()
		}
		return fmt.Errorf("receive: %w", classify(err, s.cfg.Slot))
	}
	data, err := copyData(msg, s.cfg.Slot)
	if err == nil && data != nil {
		s.backlog = append(s.backlog, append([]byte{}, data...))
	}
	return err
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
