package replication_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/wire"
)

// fakeBroker is a scriptable stand-in for the publisher: it records what was published.
// It confirms only when the test says so, or at once in auto mode. Every Dial starts a new session.
type fakeBroker struct {
	mu          sync.Mutex
	auto        bool
	sessions    []*fakeSession
	published   []wire.Message           // across sessions, in publish order
	parked      []wire.Parked            // across sessions
	refuse      func(*wire.Message) bool // Publish refuses these as unpublishable
	reject      func(*wire.Message) bool // in auto mode, these get a failed confirm (a nack)
	maxInFlight int
	changed     chan struct{} // closed and replaced on every publish
	dialErr     error
	blocked     chan struct{} // while non-nil, Publish waits for it to close (a broker alarm)
	// dieOnDeadline makes a Publish blocked by the broker end the session when its ctx ends.
	// A publisher that cuts a stalled write does so.
	// The error wraps both wire.ErrSessionClosed and the ctx's error.
	// So does the error of every later Publish of that session.
	dieOnDeadline bool
	// slowWrite makes every Publish take that long whatever its ctx says.
	// The write of a large message to a slow broker does so.
	slowWrite time.Duration
	// keepUntilFlush makes sessions Flushers.
	// In auto mode they confirm a message only once a Flush after its Publish wrote it.
	// A publisher that keeps a burst's writes does so.
	keepUntilFlush bool
	flushes        int // Flush calls that wrote something
	// slowFlush makes every Flush that has something to write take that long, as a write to a
	// slow broker does.
	slowFlush time.Duration
}

func newFakeBroker(auto bool) *fakeBroker {
	return &fakeBroker{auto: auto, changed: make(chan struct{})}
}

type fakeSession struct {
	b         *fakeBroker
	seq       uint64
	pending   []uint64
	msgs      map[uint64]wire.Message // published in this session, by sequence number
	unflushed []wire.Confirm          // keepUntilFlush: confirms waiting for a Flush
	confirms  chan wire.Confirm
	closed    bool
	err       error // why the session closed, returned by every later Publish
}

var _ replication.Publisher = (*fakeSession)(nil)

func (b *fakeBroker) dial(context.Context) (replication.Publisher, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dialErr != nil {
		return nil, b.dialErr
	}
	s := &fakeSession{b: b, confirms: make(chan wire.Confirm, 1<<16)}
	b.sessions = append(b.sessions, s)
	if b.keepUntilFlush {
		return &flushingSession{s}, nil
	}
	return s, nil
}

// flushingSession is a fakeSession that keeps its confirms until Flush.
type flushingSession struct{ *fakeSession }

var _ replication.Flusher = (*flushingSession)(nil)

func (s *flushingSession) Flush() error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if len(s.unflushed) == 0 || s.closed {
		return nil
	}
	if d := s.b.slowFlush; d > 0 {
		s.b.mu.Unlock()
		time.Sleep(d)
		s.b.mu.Lock()
	}
	s.b.flushes++
	for _, c := range s.unflushed {
		s.confirms <- c
	}
	s.unflushed = s.unflushed[:0]
	return nil
}

func (s *fakeSession) Publish(ctx context.Context, m *wire.Message) (uint64, error) {
	return s.send(ctx, m, nil)
}

// Park is a Publish of the parked copy p: blocked, numbered and confirmed alike.
func (s *fakeSession) Park(ctx context.Context, p *wire.Parked) (uint64, error) {
	return s.send(ctx, &p.Message, p)
}

// send publishes m, or parks p when it is not nil.
func (s *fakeSession) send(ctx context.Context, m *wire.Message, p *wire.Parked) (uint64, error) {
	b := s.b
	b.mu.Lock()
	if wait := b.blocked; wait != nil {
		// Like the real publisher: blocked before writing, and nothing written if ctx ends.
		b.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			if !b.dieOnDeadline {
				return 0, ctx.Err()
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			s.err = fmt.Errorf("fake: %w: publish interrupted: %w", wire.ErrSessionClosed, ctx.Err())
			s.closeLocked(s.err)
			return 0, s.err
		}
		b.mu.Lock()
	}
	if d := b.slowWrite; d > 0 {
		b.mu.Unlock()
		time.Sleep(d)
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	if s.closed {
		if s.err != nil {
			return 0, s.err
		}
		return 0, fmt.Errorf("fake: %w", wire.ErrSessionClosed)
	}
	if p == nil && b.refuse != nil && b.refuse(m) {
		return 0, fmt.Errorf("fake: %w", wire.ErrUnpublishable)
	}
	s.seq++
	if p != nil {
		b.parked = append(b.parked, *p)
	} else {
		b.published = append(b.published, *m)
	}
	if s.msgs == nil {
		s.msgs = make(map[uint64]wire.Message)
	}
	s.msgs[s.seq] = *m
	if b.auto {
		c := wire.Confirm{Seq: s.seq}
		if p == nil && b.reject != nil && b.reject(m) {
			c.Err = errors.New("fake: nacked")
		}
		if b.keepUntilFlush {
			s.unflushed = append(s.unflushed, c)
		} else {
			s.confirms <- c
		}
	} else {
		s.pending = append(s.pending, s.seq)
		b.maxInFlight = max(b.maxInFlight, len(s.pending))
	}
	close(b.changed)
	b.changed = make(chan struct{})
	return s.seq, nil
}

func (b *fakeBroker) parkedMessages() []wire.Parked {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]wire.Parked(nil), b.parked...)
}

func (s *fakeSession) Confirms() <-chan wire.Confirm { return s.confirms }

func (s *fakeSession) Close() error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.closeLocked(nil)
	return nil
}

func (s *fakeSession) closeLocked(err error) {
	if s.closed {
		return
	}
	s.closed = true
	if err != nil {
		s.confirms <- wire.Confirm{Err: err}
	}
	close(s.confirms)
}

// block stops every publish until unblock is called.
func (b *fakeBroker) block() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.blocked = make(chan struct{})
}

func (b *fakeBroker) unblock() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.blocked)
	b.blocked = nil
}

func (b *fakeBroker) sessionCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sessions)
}

// ack confirms the oldest n pending messages of the newest session.
func (b *fakeBroker) ack(n int) {
	b.verdict(n, nil)
}

// verdict gives the oldest n pending messages of the newest session the verdict err.
func (b *fakeBroker) verdict(n int, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[len(b.sessions)-1]
	n = min(n, len(s.pending))
	for _, seq := range s.pending[:n] {
		if !s.closed {
			s.confirms <- wire.Confirm{Seq: seq, Err: err}
		}
	}
	s.pending = s.pending[n:]
}

// ackAll confirms everything pending, now and from now on.
func (b *fakeBroker) ackAll() {
	b.mu.Lock()
	b.auto = true
	b.mu.Unlock()
	b.ack(1 << 30)
}

// kill ends the newest session as a dropped connection would.
func (b *fakeBroker) kill(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sessions[len(b.sessions)-1].closeLocked(err)
}

func (b *fakeBroker) pendingCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.sessions) == 0 {
		return 0
	}
	return len(b.sessions[len(b.sessions)-1].pending)
}

func (b *fakeBroker) messages() []wire.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]wire.Message(nil), b.published...)
}

// waitPublished waits until at least n messages were published in all.
func (b *fakeBroker) waitPublished(t *testing.T, n int) []wire.Message {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		b.mu.Lock()
		got, ch := len(b.published), b.changed
		b.mu.Unlock()
		if got >= n {
			return b.messages()
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("published %d messages, want %d", got, n)
		}
	}
}

// waitSessions waits until at least n sessions were dialled.
func (b *fakeBroker) waitSessions(t *testing.T, n int) {
	t.Helper()
	waitFor(t, 30*time.Second, "sessions", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.sessions) >= n
	})
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// judge gives every pending message of the newest session the verdict fail returns for it.
// A nil verdict confirms it, as a broker does once the relay stops publishing.
func (b *fakeBroker) judge(fail func(*wire.Message) error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[len(b.sessions)-1]
	for _, seq := range s.pending {
		if !s.closed {
			m := s.msgs[seq]
			s.confirms <- wire.Confirm{Seq: seq, Err: fail(&m)}
		}
	}
	s.pending = nil
}
