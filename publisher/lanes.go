package publisher

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"

	"github.com/walbox/walbox/wire"
)

// Lanes publishes over several sessions, each a connection with one channel of its own: the lanes.
// A message goes to the lane its aggregate id hashes to. So the messages of one aggregate travel on
// one channel, in the order they were published. Messages of different aggregates may overtake each
// other across lanes.
//
// To its caller Lanes is one session. Publish returns sequence numbers 1, 2, 3, ... in the order of
// the calls, whatever lane carried the message. Confirms delivers the broker's verdict on each
// under that number. It delivers them in the order the verdicts arrive. Across lanes, that is not
// the order of the sequence numbers. Some callers move a position only past a prefix of sequence
// numbers all confirmed (checkpoint.Ledger). Such a caller keeps its guarantee. Lanes numbers the
// messages itself, and its sessions give each verdict that number. Lanes keeps no record of the
// messages in flight.
//
// The first lane that fails ends them all. Confirms then reports the failure with sequence 0 and
// closes. Publish returns an error wrapping ErrClosed (outbox.ErrSessionClosed). Publish and Park
// must be called from one goroutine at a time, as for a Session.
type Lanes struct {
	lanes    []*Session
	confirms chan wire.Confirm
	seq      uint64        // the last sequence number handed out
	stop     chan struct{} // closed by Close: verdicts nobody will read are dropped
	stopOnce sync.Once
	closeAll sync.Once
	forwards sync.WaitGroup
}

// DialLanes opens n sessions with dial, one per lane, and returns them as one. The function dial is
// called n times in turn. With Endpoints.Dial the lanes spread over the nodes of a cluster. If any
// dial fails, the sessions already open are closed.
func DialLanes(ctx context.Context, n int, dial func(context.Context) (*Session, error)) (*Lanes, error) {
	if n < 1 {
		return nil, fmt.Errorf("lanes: %d; want at least 1", n)
	}
	l := &Lanes{stop: make(chan struct{})}
	window := 0
	for i := range n {
		s, err := dial(ctx)
		if err != nil {
			l.closeSessions()
			return nil, fmt.Errorf("lane %d of %d: %w", i+1, n, err)
		}
		l.lanes = append(l.lanes, s)
		window += s.cfg.Window
	}
	// The caller's own window bounds what it has not read; a lane's end adds one verdict each.
	l.confirms = make(chan wire.Confirm, window+2*n)
	l.forwards.Add(n)
	for _, ln := range l.lanes {
		go l.forward(ln)
	}
	go func() {
		l.forwards.Wait()
		close(l.confirms)
	}()
	return l, nil
}

// Sessions returns the lanes' sessions, in lane order.
func (l *Lanes) Sessions() []*Session {
	ss := make([]*Session, len(l.lanes))
	copy(ss, l.lanes)
	return ss
}

// Blocked reports whether the broker blocks any lane's connection (Session.Blocked).
func (l *Lanes) Blocked() bool {
	for _, ln := range l.lanes {
		if ln.Blocked() {
			return true
		}
	}
	return false
}

// laneOf returns the lane, of n, that carries the messages of aggregate id: FNV-1a of the id,
// modulo n. It is not the hash of package shard, so that the lanes of one shard's relay are used
// evenly.
func laneOf(aggregateID string, n int) int {
	h := fnv.New64a()
	_, _ = h.Write([]byte(aggregateID))
	return int(h.Sum64() % uint64(n))
}

// Publish publishes m on the lane of its aggregate id and returns its sequence number. Errors are
// those of Session.Publish: one that does not wrap ErrClosed wrote nothing, and the number is not
// used.
func (l *Lanes) Publish(ctx context.Context, m *wire.Message) (uint64, error) {
	return l.PublishAs(ctx, l.seq+1, m)
}

// PublishAs is Publish under seq, a number of the caller's, as Session.PublishAs. Later calls of
// Publish number on from seq.
func (l *Lanes) PublishAs(ctx context.Context, seq uint64, m *wire.Message) (uint64, error) {
	if m == nil {
		return 0, fmt.Errorf("publish: %w: nil", ErrInvalidMessage)
	}
	return l.send(m.AggregateID, seq, func(s *Session, seq uint64) (uint64, error) { return s.PublishAs(ctx, seq, m) })
}

// Park parks p (Session.Park) on the lane of its aggregate id.
func (l *Lanes) Park(ctx context.Context, p *wire.Parked) (uint64, error) {
	return l.ParkAs(ctx, l.seq+1, p)
}

// ParkAs is Park under seq, as PublishAs.
func (l *Lanes) ParkAs(ctx context.Context, seq uint64, p *wire.Parked) (uint64, error) {
	if p == nil {
		return 0, fmt.Errorf("park: %w: nil", ErrInvalidMessage)
	}
	return l.send(p.Message.AggregateID, seq, func(s *Session, seq uint64) (uint64, error) { return s.ParkAs(ctx, seq, p) })
}

// send publishes on the lane of aggregateID, under the sequence number seq, which the lane's
// session gives the message's verdict.
func (l *Lanes) send(aggregateID string, seq uint64, publish func(*Session, uint64) (uint64, error)) (uint64, error) {
	if _, err := publish(l.lanes[laneOf(aggregateID, len(l.lanes))], seq); err != nil {
		return 0, err
	}
	l.seq = seq
	return seq, nil
}

// forward passes the lane's verdicts on. A failure of the lane ends every lane.
func (l *Lanes) forward(s *Session) {
	defer l.forwards.Done()
	for c := range s.Confirms() {
		l.pass(c)
		if c.Seq == 0 {
			l.fail(c.Err)
		}
	}
	l.fail(errors.New("lane session closed"))
}

// pass hands a verdict on, unless Close was called.
func (l *Lanes) pass(c wire.Confirm) {
	select {
	case l.confirms <- c:
	case <-l.stop:
	}
}

// fail closes every lane once, after the first failure.
func (l *Lanes) fail(error) { go l.closeAll.Do(l.closeSessions) }

func (l *Lanes) closeSessions() {
	for _, ln := range l.lanes {
		_ = ln.Close()
	}
}

// Confirms returns the verdicts of every lane, numbered as Publish numbered the messages. It is
// closed once every lane has ended.
func (l *Lanes) Confirms() <-chan wire.Confirm { return l.confirms }

// Flush flushes every lane (Session.Flush: at once, or within 2.5 ms) and returns the first
// error.
func (l *Lanes) Flush() error {
	for _, ln := range l.lanes {
		if err := ln.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// Close ends every lane (Session.Close) and returns the first error.
func (l *Lanes) Close() error {
	var errs []error
	l.stopOnce.Do(func() { close(l.stop) })
	l.closeAll.Do(func() {
		for _, ln := range l.lanes {
			errs = append(errs, ln.Close())
		}
	})
	l.forwards.Wait()
	return errors.Join(errs...)
}
