package streampub

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/internal/streamconn"
	"github.com/walbox/walbox/wire"
)

// anchor is the producer's last stored message: its publishing id and position.
type anchor struct {
	id     int64    // the last stored publishing id for the producer; 0 for none
	pos    Position // the position of that message
	found  bool     // pos is known: the message was found in the stream
	offset int64    // the message's offset, if found
	// system is the message's database system identifier; "" if it has none
	system string
	// legacy is the name searched when the producer had no message of its own, else ""
	legacy string
}

// producerOf picks the messages an anchor search reads: those of the producer name. If system is
// not "", it picks those of that database system only.
type producerOf struct {
	name, system string
}

// anchorReads bounds the reads of the stream that one anchor search makes, anchorPause apart. The
// search reads again while what it reads falls short of the broker's last id.
const (
	anchorReads = 5
	anchorPause = 500 * time.Millisecond
)

// noAnchorReads is how many reads must all show no anchor before the search takes it. Each read
// reaches a member at random, and a held-back replica can win five draws in a row.
const noAnchorReads = 20

// errIncompleteRead means the stream's members that the reads reached did not show the producer's
// last message. A replica may lag behind the leader. Or another writer stored messages under this
// name without walbox's properties.
var errIncompleteRead = errors.New("the stream read does not reach the producer's last message")

// findAnchor asks the broker for the last publishing id of the producer p.name. It reads the stream
// back from its end until it finds that producer's last message. If p.system is set, that is the
// last message of p.system.
//
// The last id comes from the stream's leader. The client reads from a replica when the stream has
// one, and a replica may lag. Some reads fall short: those that show the producer's messages only
// below the last id. So do those that show none of them back to offset 0. The search then reads
// again, through another subscription: the client picks a member at random. It fails if no read
// reaches the last id. It takes "no anchor" only when nothing of the producer is left back to the
// stream's first offset. That offset must be past 0: retention removed the messages.
func findAnchor(env *stream.Environment, cfg *Config, p producerOf) (anchor, error) {
	for n := 1; ; n++ {
		a, complete, err := searchAgain(env, cfg, p, n)
		if err != nil {
			return a, err
		}
		// "No anchor" means retention removed the producer's messages. A lagging replica shows the
		// same when the producer's messages are all in the tail it lacks. So it is taken only when
		// every read says so.
		if complete && (a.found || a.id <= 0 || n >= noAnchorReads) {
			return a, nil
		}
		if complete {
			time.Sleep(anchorPause)
			continue
		}
		if n >= anchorReads {
			return a, fmt.Errorf("stream %s: %w: %d reads found producer %s's messages only below its last id %d",
				cfg.Stream, errIncompleteRead, n, p.name, a.id)
		}
		time.Sleep(anchorPause)
	}
}

// searchAgain is the nth search of findAnchor. After the first it connects anew. The client keeps
// its connection to the member it picked, and reads from it again. So a search on env would read
// the lagging replica again.
func searchAgain(env *stream.Environment, cfg *Config, p producerOf, n int) (anchor, bool, error) {
	if n == 1 {
		return searchAnchor(env, cfg, p)
	}
	fresh, err := stream.NewEnvironment(streamconn.Options().SetUris(cfg.URIs))
	if err != nil {
		return anchor{}, false, fmt.Errorf("connect: %w", wire.ErrSessionClosed) // its error may print the URI
	}
	defer fresh.Close()
	return searchAnchor(fresh, cfg, p)
}

// searchAnchor is one search of findAnchor; complete is false when the read fell short.
func searchAnchor(env *stream.Environment, cfg *Config, p producerOf) (a anchor, complete bool, err error) {
	id, err := env.QuerySequence(p.name, cfg.Stream)
	if err != nil {
		return anchor{}, false, fmt.Errorf("query sequence of producer %s: %w", p.name, err)
	}
	a = anchor{id: id}
	if id <= 0 {
		return a, true, nil // the producer never stored a message
	}
	last, err := readLastChunk(env, cfg, p)
	if err != nil {
		return a, false, err
	}
	from := int64(-1)
	// reached: the reads showed the name's message with the broker's last id, of any system. A
	// search of one system's messages (p.system) is complete only then. On a lagging replica, an
	// older message of the system, or none, would be taken for its last.
	reached, seen := false, false
	for {
		reached, seen = reached || last.nameID >= id, seen || last.nameID > 0
		if last.found {
			// Below the last id: the messages above are not in what was read.
			if p.system != "" {
				return a.at(last, p), reached, nil
			}
			return a.at(last, p), last.id >= id, nil
		}
		if last.start <= 0 {
			// Read back to offset 0: the producer stored messages, so the read fell short. It did
			// not if only one system's messages are sought under a shared name (p.system). Then it
			// is enough that the read showed the name's last message.
			return a, p.system != "" && reached, nil
		}
		if from >= 0 && last.start > from {
			// The broker began above from: retention removed the offsets before, or they
			// hold no message (see atStart). At the stream's first message, past 0, nothing
			// of this producer is left: retention removed it.
			if start, err := atStart(env, cfg, last.start); err != nil || start {
				// A system's search that saw the name's messages only below its last id fell short.
				// One that saw none of them takes retention for the cause too.
				return a, err == nil && (p.system == "" || reached || !seen), err
			}
		}
		// Read back twice as far as the last step, up to where the last step started.
		step := max(2*(last.end-last.start), 1024)
		from = max(last.start-step, 0)
		if last, err = readRange(env, cfg, p, from, last.start); err != nil {
			return a, false, err
		}
	}
}

// at returns the anchor at the producer's last message found, s. Its id and position come from the
// message itself, a consistent pair. Another session may store more messages between the query of
// the last id and the read. A message found below the last id is no anchor. The ones above it were
// removed, or written without walbox's properties. Numbering on from its id would give rows ids the
// broker already stored, and it would drop them. A search of one system's messages (p.system) takes
// its last message whatever the name's last id. Another system's messages may come after it.
func (a anchor) at(s span, p producerOf) anchor {
	if s.id < a.id && p.system == "" {
		return a
	}
	return anchor{id: s.id, pos: s.pos, found: true, offset: s.offset, system: s.system}
}

// span is what a read of part of the stream found. It covers offsets start (inclusive) to end
// (exclusive). It holds the position of the producer's last message in them.
type span struct {
	start, end int64
	pos        Position // of the producer's last message in the span
	id         int64    // that message's publishing id
	offset     int64    // its offset
	system     string   // and its database system identifier, "" for none
	found      bool
	// nameID is the highest publishing id of the name's messages in the span, of any system
	nameID int64
}

// take notes one message of the stream.
func (s *span) take(offset int64, m *amqp.Message, p producerOf) error {
	if s.end == 0 && s.start == 0 || offset < s.start {
		s.start = offset
	}
	s.end = max(s.end, offset+1)
	if name, _ := m.ApplicationProperties[PropProducer].(string); name != p.name {
		return nil
	}
	if id, ok := m.ApplicationProperties[PropPublishingID].(int64); ok {
		s.nameID = max(s.nameID, id)
	}
	system, _ := m.ApplicationProperties[PropSystem].(string)
	if p.system != "" && system != p.system {
		return nil
	}
	producer := p.name
	raw, _ := m.ApplicationProperties[PropPosition].(string)
	pos, err := parsePosition(raw)
	if err != nil {
		return fmt.Errorf("message at offset %d of producer %s: %w", offset, producer, err)
	}
	id, ok := m.ApplicationProperties[PropPublishingID].(int64)
	if !ok {
		return fmt.Errorf("message at offset %d of producer %s: no %s", offset, producer, PropPublishingID)
	}
	// The producer's last message has its highest id: the broker stores its ids only growing.
	// (Its position is the highest too, unless an earlier database system's are in the stream.)
	if !s.found || id > s.id {
		s.pos, s.id, s.found, s.offset, s.system = pos, id, true, offset, system
	}
	return nil
}

// atStart reports whether offset is the stream's first message. Some offsets hold no message: a
// named producer's state at the start of each segment, say. An offset an application stored in the
// stream holds none either. A read from one of them begins at the next message. So does a read from
// below the stream's first offset. Only the first message tells the two apart.
func atStart(env *stream.Environment, cfg *Config, offset int64) (bool, error) {
	got := make(chan int64, 1)
	c, err := env.NewConsumer(cfg.Stream, func(cc stream.ConsumerContext, _ *amqp.Message) {
		select {
		case got <- cc.Consumer.GetOffset():
		default:
		}
	}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()).SetClientProvidedName("walbox-anchor"))
	if err != nil {
		return false, fmt.Errorf("read stream %s: %w", cfg.Stream, err)
	}
	defer c.Close()
	select {
	case first := <-got:
		return first >= offset, nil
	case <-time.After(cfg.ScanTimeout):
		return false, fmt.Errorf("read stream %s: no first message within %v", cfg.Stream, cfg.ScanTimeout)
	}
}

// readLastChunk reads the stream's last chunk whole.
func readLastChunk(env *stream.Environment, cfg *Config, p producerOf) (span, error) {
	var n int // the chunk's entries; 0 until its first message arrived
	return scan(env, cfg, p, stream.OffsetSpecification{}.Last(), func(ctx stream.ConsumerContext, s *span, count int) bool {
		if n == 0 {
			n = int(ctx.GetEntriesCount())
		}
		return count >= n
	}, true)
}

// readRange reads offsets from to end (exclusive).
func readRange(env *stream.Environment, cfg *Config, p producerOf, from, end int64) (span, error) {
	return scan(env, cfg, p, stream.OffsetSpecification{}.Offset(from), func(_ stream.ConsumerContext, s *span, _ int) bool {
		return s.end >= end
	}, false)
}

// scan consumes the stream from spec until done says the read is complete. A stream that
// delivers nothing for the scan timeout is empty when emptyOK, else an error.
func scan(env *stream.Environment, cfg *Config, p producerOf, spec stream.OffsetSpecification,
	done func(stream.ConsumerContext, *span, int) bool, emptyOK bool) (span, error) {
	var (
		mu       sync.Mutex
		s        span
		count    int
		heard    = time.Now()
		complete = make(chan struct{})
		closed   bool
		failure  error
	)
	handle := func(ctx stream.ConsumerContext, m *amqp.Message) {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return
		}
		count++
		heard = time.Now()
		if err := s.take(ctx.Consumer.GetOffset(), m, p); err != nil {
			failure = err
		}
		if failure != nil || done(ctx, &s, count) {
			closed = true
			close(complete)
		}
	}
	c, err := env.NewConsumer(cfg.Stream, handle, stream.NewConsumerOptions().SetOffset(spec).
		SetClientProvidedName("walbox-anchor"))
	if err != nil {
		return s, fmt.Errorf("read stream %s: %w", cfg.Stream, err)
	}
	defer c.Close()
	tick := time.NewTicker(cfg.ScanTimeout / 10)
	defer tick.Stop()
	for {
		select {
		case <-complete:
			mu.Lock()
			defer mu.Unlock()
			return s, failure
		case <-tick.C:
		}
		mu.Lock()
		if time.Since(heard) > cfg.ScanTimeout {
			defer mu.Unlock()
			closed = true
			if count == 0 && emptyOK {
				return span{}, nil
			}
			return s, fmt.Errorf("read stream %s: nothing new for %v after offset %d", cfg.Stream, cfg.ScanTimeout, s.end-1)
		}
		mu.Unlock()
	}
}
