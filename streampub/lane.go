package streampub

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/wire"
)

// maxFrameOverhead is what a publish frame adds to one message's bytes, with room to spare.
const maxFrameOverhead = 64

// maxBatch bounds the messages of one frame, hence of one chunk. The client reads larger chunks
// wrongly, and its own batching stops at 100 too. That was checked on RabbitMQ 3.10 with client
// v1.8.3. A chunk of 1,000 small messages failed its checksum.
const maxBatch = 100

// maxFrame is the client's default frame size, which the session keeps.
const maxFrame = 1048574

// lane is one producer and the sequence numbers of its messages in flight, by publishing id.
type lane struct {
	s        *Session
	producer *stream.Producer
	maxFrame int

	// batch makes send hold messages for flush; pending are those held, pendingBytes their frame
	// size. Only the session's goroutine touches them.
	batch        bool
	pending      []message.StreamMessage
	pendingBytes int

	mu     sync.Mutex
	flight map[int64]uint64
}

// newLane declares a producer on streamName, named name ("" for none), and starts forwarding its
// confirms.
func (s *Session) newLane(streamName, name string) (*lane, error) {
	opts := stream.NewProducerOptions().SetConfirmationTimeOut(s.cfg.ConfirmTimeout).
		SetClientProvidedName("walbox").SetQueueSize(max(s.cfg.Window+16, 500))
	if name != "" {
		opts.SetProducerName(name)
	}
	p, err := s.env.NewProducer(streamName, opts)
	if err != nil {
		return nil, fmt.Errorf("declare producer on %s: %w", streamName, err)
	}
	l := &lane{s: s, producer: p, maxFrame: maxFrame, batch: name != "",
		flight: make(map[int64]uint64)}
	s.lanes.Add(1)
	go l.forward(p.NotifyPublishConfirmation(), p.NotifyClose())
	return l, nil
}

// send writes msg with publishing id, to be confirmed as seq. A batching lane holds it until flush,
// or until the next message would not fit in the frame. Another lane writes it at once.
func (l *lane) send(m *amqp.AMQP10, id int64, seq uint64) error {
	body, err := l.encode(m)
	if err != nil {
		return err
	}
	size, msg := len(body)+maxFrameOverhead, encoded{m, body}
	if l.batch && (l.pendingBytes+size > l.maxFrame-maxFrameOverhead || len(l.pending) >= maxBatch) {
		if err := l.flush(); err != nil {
			return err
		}
	}
	l.mu.Lock()
	l.flight[id] = seq
	l.mu.Unlock()
	if l.batch {
		l.pending = append(l.pending, msg)
		l.pendingBytes += size
		return nil
	}
	if err := l.guard(); err != nil {
		return err
	}
	if err := l.producer.Send(msg); err != nil {
		return fmt.Errorf("send: %w: %v", wire.ErrSessionClosed, err)
	}
	return nil
}

// guard asks the session's check (Session.Guard) whether it may write.
func (l *lane) guard() error {
	if l.s.guard == nil {
		return nil
	}
	if err := l.s.guard(); err != nil {
		return fmt.Errorf("send: %w: %w", wire.ErrSessionClosed, err)
	}
	return nil
}

// encode returns m's body; a message that cannot be encoded or is too large for the frame wraps
// wire.ErrUnpublishable.
func (l *lane) encode(m *amqp.AMQP10) ([]byte, error) { return encodeWithin(m, l.maxFrame) }

// encodeWithin encodes m, which must fit a frame of frame bytes: else it is unpublishable.
func encodeWithin(m *amqp.AMQP10, frame int) ([]byte, error) {
	body, err := m.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("encode: %w: %v", wire.ErrUnpublishable, err)
	}
	if len(body)+maxFrameOverhead > frame {
		return nil, fmt.Errorf("%w: %d bytes encoded, over the stream's frame of %d", wire.ErrUnpublishable, len(body), frame)
	}
	return body, nil
}

// encoded is a message with its body encoded once. The client encodes each message it sends, and
// the write then only copies the body.
type encoded struct {
	*amqp.AMQP10
	body []byte
}

func (e encoded) MarshalBinary() ([]byte, error) { return e.body, nil }

// flush writes the messages held, in one frame: the broker stores them as one chunk. Consumers read
// that far faster than a chunk per message.
func (l *lane) flush() error {
	if len(l.pending) == 0 {
		return nil
	}
	if err := l.guard(); err != nil {
		return err
	}
	err := l.producer.BatchSend(l.pending)
	clear(l.pending)
	l.pending, l.pendingBytes = l.pending[:0], 0
	if err != nil {
		return fmt.Errorf("send: %w: %v", wire.ErrSessionClosed, err)
	}
	killpoint.Hit("stream.flushed")
	return nil
}

// forward turns the producer's confirmations into the session's confirms, until the producer
// closes. A message the broker did not confirm ends the session.
func (l *lane) forward(confirms stream.ChannelPublishConfirm, closed stream.ChannelClose) {
	defer l.s.lanes.Done()
	for {
		select {
		case batch, ok := <-confirms:
			if !ok {
				return
			}
			if err := l.apply(batch); err != nil {
				l.s.fail(err)
			}
		case ev, ok := <-closed:
			if !ok {
				return
			}
			err := ev.Err
			if err == nil {
				err = errors.New(ev.Reason)
			}
			l.s.fail(fmt.Errorf("producer closed: %w", err))
			closed = nil // drain the confirmations until the producer closes their channel
		}
	}
}

// apply forwards a batch of confirmations; the first failure is returned.
func (l *lane) apply(batch []*stream.ConfirmationStatus) error {
	now := time.Now()
	for _, cs := range batch {
		l.mu.Lock()
		seq, ok := l.flight[cs.GetPublishingId()]
		delete(l.flight, cs.GetPublishingId())
		l.mu.Unlock()
		if !ok {
			continue
		}
		if !cs.IsConfirmed() {
			return fmt.Errorf("message %d (publishing id %d) not confirmed: %w", seq, cs.GetPublishingId(), cs.GetError())
		}
		l.s.send(wire.Confirm{Seq: seq, At: now})
	}
	return nil
}
