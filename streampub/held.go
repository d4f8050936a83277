package streampub

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
)

// Held returns which of ids (message ids) the stream holds already, in messages of this producer.
// Messages of its LegacyProducerName that name this database system count too. Another database's
// rows may have the same ids. The command walbox recover asks it before it publishes the rows of a
// gap. So a row is not stored again when the relay stored it before its slot was lost. Nor is one
// that a recover killed midway stored.
//
// It reads the stream back from its end, doubling the span each step. It stops at the stream's
// first message. Or it stops after a span that reaches before from and holds none of ids. The
// position from is that of the slot's last recorded confirm. Rows of the gap committed after from,
// and those recover stored, are all later in the stream. Call it after Bind.
func (s *Session) Held(timeline int32, lsn uint64, ids map[string]bool) (map[string]bool, error) {
	from := Position{Timeline: timeline, LSN: lsn}
	held := map[string]bool{}
	p := producerOf{name: s.cfg.Producer}
	last, err := readLastChunk(s.env, &s.cfg, p)
	if err != nil {
		return nil, err
	}
	hi, step := last.end, int64(1024)
	// The client reads from a replica, which may lag. So read at least to the producer's last
	// message. It is found where the read reaches the broker's last id (findAnchor).
	a, err := findAnchor(s.env, &s.cfg, p)
	if err != nil {
		return nil, err
	}
	if a.found {
		hi = max(hi, a.offset+1)
	}
	for hi > 0 {
		lo := max(hi-step, 0)
		r, err := s.readIDsAgain(lo, hi, from, ids, held)
		if err != nil {
			return nil, err
		}
		if lo == 0 || r.before && !r.found {
			return held, nil // the stream's start, or far enough
		}
		if r.first > lo {
			// Retention removed the offsets before, or they hold no message (atStart).
			if start, err := atStart(s.env, &s.cfg, r.first); err != nil || start {
				return held, err
			}
		}
		hi, step = lo, 2*step
	}
	return held, nil
}

// heldSpan is what a read of offsets lo to hi found:
//   - the first offset the broker sent, above lo if retention removed those below;
//   - whether a message of this producer lies before the position asked about;
//   - whether any id asked about was found.
type heldSpan struct {
	first         int64
	before, found bool
}

// errStalled means a read of the stream got no further for the scan timeout. The member the client
// subscribed to may be a replica that lags.
var errStalled = errors.New("nothing new")

// readIDsAgain reads offsets lo to hi and notes in held the ids it finds (readAgain).
func (s *Session) readIDsAgain(lo, hi int64, from Position, ids, held map[string]bool) (heldSpan, error) {
	r := heldSpan{}
	first, err := s.readAgain(lo, hi, "walbox-recover", func(m *amqp.Message) {
		s.note(m, from, ids, held, &r)
	})
	r.first = first
	return r, err
}

// readAgain is readSpan, read again when a read stalls short of hi, up to anchorReads times. Each
// read goes through another subscription: the client picks a member at random. So each may see a
// message twice.
func (s *Session) readAgain(lo, hi int64, reader string, each func(*amqp.Message)) (int64, error) {
	for n := 1; ; n++ {
		first, err := s.readSpan(lo, hi, reader, each)
		if !errors.Is(err, errStalled) || n == anchorReads {
			return first, err
		}
		time.Sleep(anchorPause)
	}
}

// readSpan reads offsets lo to hi (exclusive) and hands each message to each. It returns the
// first offset the broker sent, -1 for none.
func (s *Session) readSpan(lo, hi int64, reader string, each func(*amqp.Message)) (int64, error) {
	var (
		mu    sync.Mutex
		first = int64(-1)
		heard = time.Now()
		done  = make(chan struct{})
		ended bool
	)
	handle := func(cc stream.ConsumerContext, m *amqp.Message) {
		mu.Lock()
		defer mu.Unlock()
		if ended {
			return
		}
		offset := cc.Consumer.GetOffset()
		heard = time.Now()
		if first < 0 {
			first = offset
		}
		if offset < hi {
			each(m)
		}
		if offset >= hi-1 {
			ended = true
			close(done)
		}
	}
	c, err := s.env.NewConsumer(s.cfg.Stream, handle, stream.NewConsumerOptions().
		SetOffset(stream.OffsetSpecification{}.Offset(lo)).SetClientProvidedName(reader))
	if err != nil {
		return first, fmt.Errorf("read stream %s: %w", s.cfg.Stream, err)
	}
	defer c.Close()
	tick := time.NewTicker(s.cfg.ScanTimeout / 10)
	defer tick.Stop()
	for {
		select {
		case <-done:
			mu.Lock()
			defer mu.Unlock()
			return first, nil
		case <-tick.C:
		}
		mu.Lock()
		if time.Since(heard) > s.cfg.ScanTimeout {
			ended = true
			mu.Unlock()
			return first, fmt.Errorf("read stream %s: %w for %v reading offsets %d to %d", s.cfg.Stream, errStalled, s.cfg.ScanTimeout, lo, hi)
		}
		mu.Unlock()
	}
}

// note notes one message of this producer: its id if asked about, and whether it lies before
// from.
func (s *Session) note(m *amqp.Message, from Position, ids, held map[string]bool, r *heldSpan) {
	if !s.ours(m) {
		return
	}
	if p := m.Properties; p != nil && p.MessageID != nil {
		if id := fmt.Sprint(p.MessageID); ids[id] {
			held[id], r.found = true, true
		}
	}
	raw, _ := m.ApplicationProperties[PropPosition].(string)
	if pos, err := parsePosition(raw); err == nil && pos.less(from) {
		r.before = true
	}
}

// ours reports whether m is this producer's, as Bind continues from. It is when it has its name, or
// LegacyProducerName from this database system. A message of the old name that names no system may
// be another cluster's with the same slot name. Its ids say nothing of this database's rows.
func (s *Session) ours(m *amqp.Message) bool {
	p, _ := m.ApplicationProperties[PropProducer].(string)
	if p == s.cfg.Producer {
		return true
	}
	sys, _ := m.ApplicationProperties[PropSystem].(string)
	return p == LegacyProducerName(s.cfg.Slot) && sys != "" && sys == s.system
}
