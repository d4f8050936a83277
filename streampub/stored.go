package streampub

import (
	"bytes"
	"crypto/sha256"
	"fmt"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/walbox/walbox/wire"
)

// stored is what the stream holds of this producer from a position up to the anchor. It is
// what a session skips. The anchor check (replication's) finds the anchor's commit LSN in the server's
// WAL. A server restored from an older copy may have written past it again, with other rows.
// So each message the session skips must be the stream's message at its position: the same id
// and body. One that is not was never stored, and skipping it would lose it.
type stored struct {
	read  bool                // the stream was read back
	from  Position            // the first position skipped, where the read back stops
	floor Position            // the lowest position read, if the read reached the stream's first message
	short bool                // the read reached the stream's first message before from
	byPos map[Position]digest // this producer's messages from from to the anchor
}

// digest is what tells two messages at one position apart: the message id and the body's hash.
type digest struct {
	id   string
	body [sha256.Size]byte
}

func digestOf(m *amqp.AMQP10) digest {
	d := digest{body: sha256.Sum256(bytes.Join(m.GetData(), nil))}
	if m.Properties != nil && m.Properties.MessageID != nil {
		d.id = fmt.Sprint(m.Properties.MessageID)
	}
	return d
}

// storedDigest is digestOf for a message read from the stream.
func storedDigest(m *amqp.Message) digest {
	d := digest{body: sha256.Sum256(bytes.Join(m.Data, nil))}
	if m.Properties != nil && m.Properties.MessageID != nil {
		d.id = fmt.Sprint(m.Properties.MessageID)
	}
	return d
}

// errNotStored means a message the session would skip is not the stream's message at its
// position. The server's WAL is not the one the stream was fed from.
type errNotStored struct {
	Stream string
	Pos    Position
	Anchor Position
	Found  bool // the stream holds another message at Pos
}

func (e *errNotStored) Error() string {
	there := "no message of this relay"
	if e.Found {
		there = "another message"
	}
	return fmt.Sprintf("stream %s: the stream holds rows this server's WAL does not have: at %s, before the stream's last row "+
		"at %s, the server has a row where the stream has %s: this server's data directory was restored from a copy older "+
		"than the stream, and it wrote other rows since. walbox stops rather than take new rows for stored ones. "+
		"Point it at the server that wrote the stream's rows (the current primary). If they are gone for good, "+
		"publish into a new stream (--stream) or from a new slot. Or walbox's settings changed since a relay stored them "+
		"(a table's mapping, --message-prefix, the tables relayed), and a row's message is another: "+
		"run with the old settings until the slot is past the stream's last row", e.Stream, e.Pos, e.Anchor, there)
}

// Unwrap makes the error wire.ErrConflict, on which the relay stops, and ErrNotStored.
func (e *errNotStored) Unwrap() []error { return []error{wire.ErrConflict, ErrNotStored} }

// checkStored checks that msg, which the session is about to skip at s.pos, is the stream's
// message at that position. The first call reads the stream back from the anchor to before
// s.pos. The relay's replay comes in position order, so later skips lie between the two.
func (s *Session) checkStored(msg *amqp.AMQP10) error {
	if !s.stored.read {
		if err := s.readStored(s.pos); err != nil {
			return err
		}
	}
	got, ok := s.stored.byPos[s.pos]
	if ok && got == digestOf(msg) {
		return nil
	}
	if !ok && s.stored.short && s.pos.less(s.stored.floor) {
		return nil // retention removed the stream's messages there
	}
	return &errNotStored{Stream: s.cfg.Stream, Pos: s.pos, Anchor: s.anchor.pos, Found: ok}
}

// readStored reads the stream back from the anchor, doubling the span each step. It stops at a
// message of this producer before from, or at the stream's first message.
func (s *Session) readStored(from Position) error {
	st := stored{read: true, from: from, byPos: map[Position]digest{}}
	before := false
	each := func(m *amqp.Message) {
		if !s.ours(m) {
			return
		}
		raw, _ := m.ApplicationProperties[PropPosition].(string)
		pos, err := parsePosition(raw)
		if err != nil || s.anchor.pos.less(pos) {
			return
		}
		if pos.less(from) {
			before = true
			return
		}
		if len(st.byPos) == 0 || pos.less(st.floor) {
			st.floor = pos
		}
		st.byPos[pos] = storedDigest(m)
	}
	hi, step := s.anchor.offset+1, int64(1024)
	for hi > 0 && !before {
		lo := max(hi-step, 0)
		first, err := s.readAgain(lo, hi, "walbox-anchor", each)
		if err != nil {
			return fmt.Errorf("read back the stream's rows before its last one: %w", err)
		}
		if lo == 0 {
			st.short = first > 0 // retention may have removed offsets before first
			break
		}
		if first > lo {
			// Retention removed the offsets before, or they hold no message (atStart).
			start, err := atStart(s.env, &s.cfg, first)
			if err != nil {
				return fmt.Errorf("read back the stream's rows before its last one: %w", err)
			}
			if start {
				st.short = true
				break
			}
		}
		hi, step = lo, 2*step
	}
	st.short = st.short && !before
	s.stored = st
	return nil
}
