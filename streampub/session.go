package streampub

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/internal/streamconn"
	"github.com/walbox/walbox/wire"
)

// Session is one publishing session into the stream: one connection, the named producer and the
// park stream's producer. Publish, Park, At and Close are called from one goroutine.
type Session struct {
	cfg    Config
	env    *stream.Environment
	main   *lane // the named producer: exactly once
	park   *lane // the park stream's producer: at least once
	anchor anchor
	stored stored // what the stream holds from the first message skipped to the anchor

	system string       // the database system identifier, set by Bind; "" for none
	guard  func() error // called before each write; nil for none (Guard)
	pos    Position     // the next message's position, set by At
	posSet bool
	nextID int64  // the next message's publishing id
	known  int64  // the producer's last id known to Bind, of its own name (Moved)
	seq    uint64 // the last sequence number handed out

	mu       sync.Mutex
	confirms chan wire.Confirm
	ended    bool // confirms is closed
	lanes    sync.WaitGroup
}

// Dial opens a session: it connects and declares the stream (and the park stream) if missing. With
// Config.Producer set it binds the session at once, to no database system. With Config.Slot, Bind
// names the producer before the first Publish.
func Dial(ctx context.Context, cfg Config) (*Session, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	env, err := stream.NewEnvironment(streamconn.Options().SetUris(cfg.URIs).SetMaxProducersPerClient(2))
	if err != nil {
		return nil, fmt.Errorf("connect: %w", wire.ErrSessionClosed) // its error may print the URI
	}
	s := &Session{cfg: cfg, env: env, confirms: make(chan wire.Confirm, cfg.Window+16)}
	if err := s.open(ctx); err != nil {
		_ = env.Close()
		return nil, err
	}
	return s, nil
}

func (s *Session) open(ctx context.Context) error {
	for _, name := range []string{s.cfg.Stream, ParkStream(s.cfg.Stream)} {
		if err := declare(s.env, name, &s.cfg); err != nil {
			return err
		}
	}
	if s.cfg.Producer == "" {
		return nil
	}
	return s.bind(ctx, producerOf{name: s.cfg.Producer}, "")
}

// Bind names the producer after the database system and the database of the slot (ProducerName).
// The system is named by its identifier, IDENTIFY_SYSTEM's. Bind finds the anchor and declares the
// producer. The relay calls it once per session (replication.SystemBound). A producer whose name
// has no stored message may continue from LegacyProducerName. It continues from the last message of
// this system under that name, if the stream has one. That message's id and position are its
// anchor. The broker knows no id of the new name, so its first message, numbered one past that id,
// is stored. The old name is read no more once the new one has a message. An anchor of another
// system's identifier under this name stops the session. The error is wire.ErrConflict: the name
// was meant to be this relay's alone.
func (s *Session) Bind(ctx context.Context, system uint64, database string) error {
	if s.main != nil {
		return errors.New("bind: the session is bound already")
	}
	if s.cfg.Slot == "" {
		return errors.New("bind: no slot configured")
	}
	sys := strconv.FormatUint(system, 10)
	name := ProducerName(system, database, s.cfg.Slot)
	if err := s.bind(ctx, producerOf{name: name}, sys); err != nil {
		return err
	}
	if s.anchor.found && s.anchor.system != sys {
		return &foreignAnchorError{Stream: s.cfg.Stream, Producer: name, System: sys, Found: s.anchor.system}
	}
	return nil
}

// bind finds the anchor of producer p for system, and declares the producers. When p has no anchor
// and system is set, the legacy name's anchor is taken.
func (s *Session) bind(ctx context.Context, p producerOf, system string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	a, err := lookupAnchor(s.env, &s.cfg, p, system)
	if err != nil {
		return err
	}
	s.cfg.Producer, s.system, s.anchor, s.nextID = p.name, system, a, a.id+1
	if a.legacy == "" {
		s.known = a.id
	}
	if s.main, err = s.newLane(s.cfg.Stream, p.name); err != nil {
		return err
	}
	if s.park, err = s.newLane(ParkStream(s.cfg.Stream), ""); err != nil {
		return err
	}
	return nil
}

// lookupAnchor finds the anchor of producer p for system. When p has no anchor and system is set,
// it takes the legacy name's anchor.
func lookupAnchor(env *stream.Environment, cfg *Config, p producerOf, system string) (anchor, error) {
	a, err := findAnchor(env, cfg, p)
	if err != nil || a.id != 0 || system == "" {
		return a, err
	}
	legacy := producerOf{name: LegacyProducerName(cfg.Slot), system: system}
	if a, err = findAnchor(env, cfg, legacy); err != nil {
		return a, err
	}
	if !a.found {
		a = anchor{} // none of this system's: number from 1
	}
	a.legacy = legacy.name
	return a, nil
}

// declare creates the stream with the configured retention unless it exists. A stream that exists
// is not declared again, and keeps its own arguments. The broker refuses a declaration whose
// arguments differ from the stream's: a segment size, another retention.
func declare(env *stream.Environment, name string, cfg *Config) error {
	exists, err := env.StreamExists(name)
	if err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	if exists {
		return nil
	}
	opts := stream.NewStreamOptions()
	if cfg.MaxAge > 0 {
		opts.SetMaxAge(cfg.MaxAge)
	}
	if cfg.MaxBytes > 0 {
		opts.SetMaxLengthBytes(stream.ByteCapacity{}.B(cfg.MaxBytes))
	}
	err = env.DeclareStream(name, opts)
	if err != nil && !errors.Is(err, stream.StreamAlreadyExists) {
		return fmt.Errorf("declare stream %s: %w", name, err)
	}
	return nil
}

// Anchor returns the producer's last stored publishing id. If the stream still holds that message,
// it returns its position: what this session skips.
func (s *Session) Anchor() (id int64, pos Position, found bool) {
	return s.anchor.id, s.anchor.pos, s.anchor.found
}

// Last returns the position of the anchor (replication.Anchored). That is the last message the
// stream holds of this producer. found is false when there is none.
func (s *Session) Last() (timeline int32, commitLSN uint64, found bool) {
	return s.anchor.pos.Timeline, s.anchor.pos.LSN, s.anchor.found
}

// Moved asks the broker again for the producer's last id (replication.Anchored). It reports whether
// the broker stored messages of the producer since Bind read the anchor. Another relay held the
// slot meanwhile. The session's numbering is then stale. Its first rows would get ids the broker
// has.
func (s *Session) Moved(context.Context) (bool, error) {
	id, err := s.env.QuerySequence(s.cfg.Producer, s.cfg.Stream)
	if err != nil {
		return false, fmt.Errorf("query sequence of producer %s: %w", s.cfg.Producer, err)
	}
	return id > s.known, nil
}

// Producer returns the producer's name. It returns too the name whose last message the anchor is,
// when the producer had none of its own. That name is "" otherwise.
func (s *Session) Producer() (name, continued string) {
	if s.anchor.found {
		continued = s.anchor.legacy
	}
	return s.cfg.Producer, continued
}

// Guard sets check, which the session calls right before each write to the broker
// (replication.Guarded). An error fails the write, which then sends nothing. The relay checks there
// that its replication connection may still hold the slot.
func (s *Session) Guard(check func() error) { s.guard = check }

// Skips reports whether Publish would take a message at position (timeline, lsn, index) for one the
// stream holds. Such a message lies at or before the anchor. It names the anchor's position.
func (s *Session) Skips(timeline int32, lsn uint64, index int) (anchor string, skips bool) {
	at := Position{Timeline: timeline, LSN: lsn, Index: index}
	return s.anchor.pos.String(), s.anchor.found && !s.anchor.pos.less(at)
}

// At sets the position of the message the next Publish sends (replication.Positioner).
func (s *Session) At(timeline int32, lsn uint64, index int) {
	s.pos, s.posSet = Position{Timeline: timeline, LSN: lsn, Index: index}, true
}

// Publish sends m into the stream with the next publishing id. Or it confirms it at once if the
// stream has it already: its position is at or before the anchor. It returns the message's sequence
// number. A message too large for a frame wraps wire.ErrUnpublishable.
func (s *Session) Publish(_ context.Context, m *wire.Message) (uint64, error) {
	if s.main == nil {
		return 0, errors.New("publish: no producer (call Bind first)")
	}
	if !s.posSet {
		return 0, errors.New("publish: no position given (call At first)")
	}
	s.posSet = false
	msg, err := s.message(m)
	if err != nil {
		return 0, err
	}
	if s.anchor.found && !s.anchor.pos.less(s.pos) || s.pos.LSN < s.cfg.SkipBefore {
		// Only a message the stream could hold is in it. One too large was parked. Or its session
		// died before the park stream had it, and it must be parked again.
		msg.SetPublishingId(s.anchor.id)
		msg.ApplicationProperties[PropPublishingID] = s.anchor.id
		if _, err := s.main.encode(msg); err != nil {
			return 0, err
		}
		// Rows before a reshard's cut are the old set's, in no message of this producer.
		if s.pos.LSN >= s.cfg.SkipBefore {
			if err := s.checkStored(msg); err != nil {
				return 0, err
			}
		}
		seq := s.nextSeq()
		s.send(wire.Confirm{Seq: seq, At: time.Now()})
		killpoint.Hit("stream.stored")
		return seq, nil
	}
	msg.SetPublishingId(s.nextID)
	msg.ApplicationProperties[PropPublishingID] = s.nextID
	seq := s.nextSeq()
	if err := s.main.send(msg, s.nextID, seq); err != nil {
		s.seq--
		return 0, err
	}
	s.nextID++
	return seq, nil
}

// Flush writes the messages Publish holds at once, in one frame (wire.Flusher). The relay calls
// it whenever it goes back to waiting.
func (s *Session) Flush() error {
	if s.main == nil {
		return nil
	}
	return s.main.flush()
}

// Park sends p into the park stream, at least once.
func (s *Session) Park(_ context.Context, p *wire.Parked) (uint64, error) {
	if s.park == nil {
		return 0, errors.New("park: no producer (call Bind first)")
	}
	msg := parkedMessage(p)
	seq := s.nextSeq()
	id := int64(seq) // the park lane is unnamed: its ids are only to match confirms
	msg.SetPublishingId(id)
	if err := s.park.send(msg, id, seq); err != nil {
		s.seq--
		return 0, err
	}
	return seq, nil
}

func (s *Session) nextSeq() uint64 {
	s.seq++
	return s.seq
}

// Confirms yields one verdict per message accepted (see the package doc).
func (s *Session) Confirms() <-chan wire.Confirm { return s.confirms }

// send hands c to the relay unless the session ended. The channel holds a window of confirms
// and one more for the end, so it never blocks.
func (s *Session) send(c wire.Confirm) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.confirms <- c
	}
}

// fail ends the session: the relay reads err, then a closed channel.
func (s *Session) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.confirms <- wire.Confirm{Err: fmt.Errorf("%w: %w", wire.ErrSessionClosed, err), At: time.Now()}
	s.ended = true
	close(s.confirms)
}

// closeTimeout bounds Close. On a dead connection the client waits for in-flight messages and for
// replies that never come. And the relay must get back to its replication connection.
const closeTimeout = time.Second

// Close ends the session and releases the connection, within closeTimeout. What is left of the
// client's teardown then finishes in the background.
func (s *Session) Close() error {
	done := make(chan error, 1)
	go func() {
		for _, l := range []*lane{s.main, s.park} {
			if l != nil {
				_ = l.producer.Close()
			}
		}
		s.lanes.Wait()
		done <- s.env.Close()
	}()
	defer s.fail(errors.New("closed"))
	select {
	case err := <-done:
		return err
	case <-time.After(closeTimeout):
		return fmt.Errorf("close: %w: the client's teardown goes on in the background", wire.ErrSessionClosed)
	}
}

// Ended reports whether the session is over: closed, or failed.
func (s *Session) Ended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}
