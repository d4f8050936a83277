package publisher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/wire"
)

// ParkedMessage is one message of the park queue, as walbox parked it.
type ParkedMessage struct {
	// ID is the row's message id.
	ID string
	// Table and LSN say where the row came from; Reason why it was parked.
	Table, LSN, Reason string
	// ParkedAt is when it was parked; zero for a message parked before walbox recorded it.
	ParkedAt time.Time
	// Size is the payload's size in bytes, whether Body kept it or not.
	Size int
	// Body is the payload, nil where it was dropped (too large).
	Body []byte
	// Headers are every header of the parked copy, walbox's and the aggregate's.
	Headers amqp.Table
	// CreatedAt is the row's creation time, in whole seconds.
	CreatedAt time.Time
	// Returned is how often readers returned it to a quorum queue (x-delivery-count).
	Returned int64
	// Database names the row's database (wire.ParkedBy); "" for a copy that does not say.
	Database string

	tag uint64
}

// BodyDropped reports whether the payload was left out of the parked copy.
func (p *ParkedMessage) BodyDropped() bool { return len(p.Body) == 0 && p.Size > 0 }

// Message returns the row as the parked copy holds it. That is its id, aggregate, event type, own
// exchange and routing key, own headers and payload. It reports false where the headers were too
// large to keep.
func (p *ParkedMessage) Message() (m wire.Message, ok bool) {
	str := func(k string) string { s, _ := p.Headers[k].(string); return s }
	m = wire.Message{
		MessageID: p.ID, AggregateType: str(HeaderAggregateType), AggregateID: str(HeaderAggregateID),
		EventType: str(HeaderParkEventType), Payload: p.Body, CreatedAt: p.CreatedAt,
		Exchange: str(HeaderParkExchange), RoutingKey: str(HeaderParkRoutingKey),
	}
	if id, err := uuid.Parse(p.ID); err == nil && id.String() == p.ID {
		m.ID = id
	}
	m.CommitTime, _ = wire.ParseCommitTime(p.Headers[wire.HeaderCommitTime])
	v, present := p.Headers[HeaderParkHeaders]
	raw, kept := v.(string)
	if !kept {
		return m, !present
	}
	d := json.NewDecoder(bytes.NewReader([]byte(raw)))
	d.UseNumber()
	if err := d.Decode(&m.Headers); err != nil {
		return m, false
	}
	return m, true
}

func parkedOf(d *amqp.Delivery) ParkedMessage {
	p := ParkedMessage{ID: d.MessageId, Body: d.Body, Headers: d.Headers, CreatedAt: d.Timestamp, tag: d.DeliveryTag}
	p.Table, _ = d.Headers[HeaderParkTable].(string)
	p.LSN, _ = d.Headers[HeaderParkLSN].(string)
	p.Reason, _ = d.Headers[HeaderParkReason].(string)
	p.Database, _ = d.Headers[HeaderParkDatabase].(string)
	p.ParkedAt, _ = d.Headers[HeaderParkParkedAt].(time.Time)
	p.Size = len(d.Body)
	if n, ok := intHeader(d.Headers[HeaderParkSize]); ok {
		p.Size = int(n)
	}
	p.Returned, _ = intHeader(d.Headers["x-delivery-count"])
	return p
}

func intHeader(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case int16:
		return int64(n), true
	case int8:
		return int64(n), true
	case uint8:
		return int64(n), true
	}
	return 0, false
}

// ParkedReader holds the messages of the park queue, taken on a channel of their own without
// acknowledging them. No other reader gets them meanwhile. Close returns the ones not removed to the
// queue. Classic queues put them back in place; quorum queues count a return (x-delivery-count).
type ParkedReader struct {
	conn     *amqp.Connection
	queue    string
	ch       *amqp.Channel
	done     bool // closed
	closed   chan *amqp.Error
	removed  map[uint64]bool // delivery tags removed
	Messages []ParkedMessage
	// More is how many more were ready when the reader began, past its limit.
	More int
}

// parkedIdle is how long ReadParked waits for a delivery the queue's count promised.
const parkedIdle = 5 * time.Second

// ReadParked takes the messages ready in the park queue (Config.ParkExchange). It takes up to the
// count the queue gave when asked, and at most limit. The broker sends no more than limit (the channel's
// prefetch), so memory stays bounded. Messages another reader holds are not among them. The caller
// removes some (Remove) and closes the reader.
func (s *Session) ReadParked(ctx context.Context, limit int) (*ParkedReader, error) {
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	r := &ParkedReader{conn: s.conn, queue: s.cfg.ParkExchange, ch: ch, closed: ch.NotifyClose(make(chan *amqp.Error, 1)),
		removed: map[uint64]bool{}}
	if err := r.read(ctx, s.cfg.ParkExchange, limit); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *ParkedReader) read(ctx context.Context, queue string, limit int) error {
	q, err := r.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("park queue %s: %w", queue, err)
	}
	want := min(q.Messages, limit)
	r.More = q.Messages - want
	if want <= 0 {
		return nil
	}
	if err := r.ch.Qos(want, 0, false); err != nil {
		return fmt.Errorf("read park queue %s: %w", queue, err)
	}
	const tag = "walbox-parked"
	deliveries, err := r.ch.ConsumeWithContext(ctx, queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("read park queue %s: %w", queue, err)
	}
	err = r.take(ctx, queue, deliveries, want)
	// The reader takes no more. A message parked meanwhile, or parked anew, stays ready. Taken
	// here, it would be returned on Close and counted as returned.
	if cerr := r.ch.Cancel(tag, false); err == nil && cerr != nil {
		err = fmt.Errorf("read park queue %s: %w", queue, cerr)
	}
	return err
}

// take appends deliveries to Messages until it holds want, or none came for parkedIdle.
func (r *ParkedReader) take(ctx context.Context, queue string, deliveries <-chan amqp.Delivery, want int) error {
	idle := time.NewTimer(parkedIdle)
	defer idle.Stop()
	for len(r.Messages) < want {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("read park queue %s: %w", queue, r.closeCause())
			}
			r.Messages = append(r.Messages, parkedOf(&d))
			idle.Reset(parkedIdle)
		case <-idle.C:
			return nil // another reader holds the rest
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (r *ParkedReader) closeCause() error {
	select {
	case e, ok := <-r.closed:
		if ok && e != nil {
			return e
		}
	default:
	}
	return errors.New("channel closed")
}

// Remove removes p from the park queue. The broker acknowledges nothing back: a reader killed right
// after may still find it there.
func (r *ParkedReader) Remove(p *ParkedMessage) error {
	if err := r.ch.Ack(p.tag, false); err != nil {
		return fmt.Errorf("remove %s from the park queue: %w", p.ID, err)
	}
	r.removed[p.tag] = true
	return nil
}

// Repark parks p again as it is, with confirms like Park. The new copy goes to the back of the park queue.
// Its count of returns starts from zero. The caller then removes p.
func (s *Session) Repark(ctx context.Context, p *ParkedMessage) (uint64, error) {
	if err := s.awaitPark(ctx); err != nil {
		return 0, fmt.Errorf("park %.255s again: %w", p.ID, err)
	}
	h := make(amqp.Table, len(p.Headers))
	for k, v := range p.Headers {
		if k != "x-delivery-count" {
			h[k] = v
		}
	}
	msg := amqp.Publishing{Headers: h, ContentType: parkedContentType, DeliveryMode: amqp.Persistent, MessageId: p.ID,
		Timestamp: p.CreatedAt, Type: parkedType, AppId: s.cfg.AppID, Body: p.Body}
	tag, err := s.publish(ctx, 0, s.cfg.ParkExchange, "", msg)
	if err != nil {
		return 0, fmt.Errorf("park %.255s again: %w", p.ID, err)
	}
	return tag, nil
}

// Removed reports whether Remove removed p.
func (r *ParkedReader) Removed(p *ParkedMessage) bool { return r.removed[p.tag] }

// returnWait bounds how long Close waits for the messages it returned to be ready again.
const returnWait = 10 * time.Second

// Close returns every message not removed to the park queue. It waits, up to returnWait, until the
// queue counts them ready again. A quorum queue takes them back some time after the channel
// closed. A command run right after would miss them: "no parked messages", or an unknown id.
func (r *ParkedReader) Close() error {
	if r.done {
		return nil
	}
	r.done = true
	if err := r.ch.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return err
	}
	if len(r.Messages) == len(r.removed) {
		return nil
	}
	want := r.More + len(r.Messages) - len(r.removed)
	for deadline := time.Now().Add(returnWait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ch, err := r.conn.Channel()
		if err != nil {
			return nil // they come back all the same
		}
		q, err := ch.QueueDeclarePassive(r.queue, true, false, false, false, nil)
		_ = ch.Close()
		if err != nil || q.Messages >= want {
			return nil
		}
	}
	return nil // a consumer of the park queue may have taken some
}
