package publisher

import (
	"fmt"
	"regexp"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/wire"
)

// tracker is the state of run, the goroutine that turns amqp091's notifications into Confirms.
//
// The library amqp091 delivers acks and returns on separate Go channels. But both come from its
// single reader goroutine, in wire order. It hands a basic.return to the returns channel before it
// processes the frames after it. The broker sends an unroutable message's basic.return before its
// basic.ack. So once run receives the ack for delivery tag t, the return for t, if any, is already
// buffered. So run drains returns before it judges an ack. Returns carry no delivery tag. They are
// matched to in-flight tags by message id (Session.unacked). The session counts nothing else: the
// caller bounds what is in flight.
type tracker struct {
	acks    <-chan amqp.Confirmation // nil once closed
	returns <-chan amqp.Return       // nil once closed
	blocks  <-chan amqp.Blocking     // nil once closed

	acked    uint64                  // last delivery tag with a verdict
	returned map[uint64]*ReturnError // returns waiting for their ack, by delivery tag
	queue    []wire.Confirm          // verdicts waiting for room in Session.confirms
	head     int                     // first waiting verdict in queue
	final    bool                    // the last Confirm is queued
	closed   bool                    // Session.confirms is closed
}

func (s *Session) run() {
	defer close(s.done)
	s.tr.acks, s.tr.returns, s.tr.blocks = s.acks, s.returns, s.blocks
	for {
		var out chan<- wire.Confirm
		var next wire.Confirm
		if s.tr.head < len(s.tr.queue) {
			out, next = s.confirms, s.tr.queue[s.tr.head]
		} else if s.tr.final && !s.tr.closed {
			close(s.confirms)
			s.tr.closed = true
		}
		select {
		case out <- next:
			s.pop()
		case c, ok := <-s.tr.acks:
			s.onAck(c, ok)
		case r, ok := <-s.tr.returns:
			s.onReturn(r, ok)
		case b, ok := <-s.tr.blocks:
			if !ok {
				s.tr.blocks = nil
				s.setBlocked(false, SessionEnded)
				continue
			}
			s.setBlocked(b.Active, b.Reason)
		case <-s.stop:
			s.setBlocked(false, SessionEnded)
			s.closeConfirms()
			return
		}
	}
}

// onAck judges c, and the confirmations that were already waiting behind it when it arrived. It
// does so in one turn of run. The library amqp091 splits a multiple ack into one Confirmation per
// delivery tag. They arrive together. Acks that come in meanwhile wait for the next turn. So a turn
// is bounded, and every verdict's time is no earlier than its arrival.
func (s *Session) onAck(c amqp.Confirmation, ok bool) {
	at := time.Now() // they arrived by now: amqp091's reader hands them over at once
	for waiting := len(s.tr.acks); ; waiting-- {
		if !ok {
			s.end(s.closeCause())
			return
		}
		s.drainReturns()
		if s.tr.final {
			return // a return matching nothing in flight ended the session: no verdict after its last
		}
		if err := s.judge(c, at); err != nil {
			s.cut()
			s.end(err)
			return
		}
		if waiting == 0 {
			return
		}
		c, ok = <-s.tr.acks
	}
}

// judge turns the confirmation of the next delivery tag into a Confirm. The library amqp091
// re-sequences confirmations. So anything but the next tag means a confirmation was lost.
func (s *Session) judge(c amqp.Confirmation, at time.Time) error {
	tag := s.tr.acked + 1
	o, ok := s.popUnacked()
	if c.DeliveryTag != tag || !ok {
		return fmt.Errorf("%w: confirmation for delivery tag %d, want %d", ErrClosed, c.DeliveryTag, tag)
	}
	s.tr.acked = tag
	var err error
	if re := s.tr.returned[tag]; re != nil {
		delete(s.tr.returned, tag)
		err = re
	} else if !c.Ack || nackedBefore(o.dc) {
		err = fmt.Errorf("message %s: %w", o.id, ErrNacked)
	}
	s.emit(wire.Confirm{Seq: o.seq, Err: err, At: at, Written: s.out.writtenAt(tag)})
	return nil
}

// nackedBefore reports whether amqp091 recorded a nack for dc's message. By the time its
// confirmation stream yields the tag, dc has its verdict. The value dc is nil only for the newest
// publish, whose call has not yet returned. The stream misreports only tags below a multiple ack's,
// and their publish calls have returned. So for a nil dc the stream's own verdict is right.
func nackedBefore(dc *amqp.DeferredConfirmation) bool {
	if dc == nil {
		return false
	}
	select {
	case <-dc.Done():
		return !dc.Acked()
	default:
		return false
	}
}

// popUnacked takes the oldest message without a verdict, the one of delivery tag tr.acked+1.
func (s *Session) popUnacked() (outgoing, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.unacked) == 0 {
		return outgoing{}, false
	}
	o := s.unacked[0]
	s.unacked[0] = outgoing{}
	s.unacked = s.unacked[1:]
	if len(s.unacked) == 0 {
		s.unacked = s.unacked[:0:0] // let the drained backing array go
	}
	return o, true
}

func (s *Session) drainReturns() {
	for s.tr.returns != nil {
		select {
		case r, ok := <-s.tr.returns:
			s.onReturn(r, ok)
		default:
			return
		}
	}
}

// onReturn marks every in-flight delivery tag with the returned message's id. Ids are unique in
// practice. Should one be in flight twice, both are marked. A false ErrReturned costs a replay,
// while a false success loses a message. A return that matches nothing in flight means its ack was
// judged before it. The session then ends rather than vouch for what it has confirmed.
func (s *Session) onReturn(r amqp.Return, ok bool) {
	if !ok {
		s.tr.returns = nil
		return
	}
	re := &ReturnError{MessageID: r.MessageId, Code: r.ReplyCode, Text: r.ReplyText}
	found := false
	s.mu.Lock()
	for i, o := range s.unacked {
		if tag := s.tr.acked + 1 + uint64(i); o.id == r.MessageId {
			if s.tr.returned == nil {
				s.tr.returned = make(map[uint64]*ReturnError)
			}
			s.tr.returned[tag] = re
			found = true
		}
	}
	s.mu.Unlock()
	if !found && !s.tr.final {
		s.cut()
		s.end(fmt.Errorf("%w: basic.return for message %s matches no message in flight", ErrClosed, r.MessageId))
	}
}

// closeCause reads why amqp091 closed the channel; the connection's reason comes second, since
// a connection failure reaches both listeners. Both are buffered before the acks are closed.
func (s *Session) closeCause() error {
	for _, c := range []chan *amqp.Error{s.chClose, s.connClose} {
		select {
		case e, ok := <-c:
			if ok && e != nil {
				return closedBy(e)
			}
		default:
		}
	}
	return fmt.Errorf("%w: channel closed", ErrClosed)
}

// closedBy is the session's failure for the broker's closing error e. A refusal for size also wraps
// a *wire.TooLargeError, which the relay parks the message for.
func closedBy(e *amqp.Error) error {
	if e.Code == amqp.PreconditionFailed && tooLargeText.MatchString(e.Reason) {
		return fmt.Errorf("%w: %w", ErrClosed, &wire.TooLargeError{Reason: e.Reason, Err: e})
	}
	return fmt.Errorf("%w: %w", ErrClosed, e)
}

// tooLargeText matches RabbitMQ's reason for a message over max_message_size. The reason leaves
// "configured" out when the limit is the broker's hard maximum.
var tooLargeText = regexp.MustCompile(`message size \d+ is larger than (configured )?max size \d+`)

// end records the failure and queues the last Confirm, carrying the first failure recorded.
func (s *Session) end(err error) {
	s.tr.acks = nil
	if s.tr.final {
		return
	}
	s.fail(err)
	s.emit(wire.Confirm{Err: s.failure()})
	s.tr.final = true
}

// emit hands c to the reader of Confirms, or queues it when the buffer is full. It never blocks, so
// amqp091's notifications are always drained.
func (s *Session) emit(c wire.Confirm) {
	if s.tr.head == len(s.tr.queue) {
		select {
		case s.confirms <- c:
			return
		default:
		}
	}
	s.tr.queue = append(s.tr.queue, c)
}

func (s *Session) pop() {
	s.tr.queue[s.tr.head] = wire.Confirm{}
	s.tr.head++
	switch {
	case s.tr.head == len(s.tr.queue):
		s.tr.queue, s.tr.head = s.tr.queue[:0], 0
	case s.tr.head >= 1024 && 2*s.tr.head >= len(s.tr.queue):
		n := copy(s.tr.queue, s.tr.queue[s.tr.head:])
		s.tr.queue, s.tr.head = s.tr.queue[:n], 0
	}
}

// closeConfirms ends run for Close: whatever fits in the buffer is delivered, then Confirms is
// closed.
func (s *Session) closeConfirms() {
	if s.tr.closed {
		return
	}
	if !s.tr.final {
		s.tr.queue = append(s.tr.queue, wire.Confirm{Err: s.failure()})
	}
	for _, c := range s.tr.queue[s.tr.head:] {
		select {
		case s.confirms <- c:
			continue
		default:
		}
		break // no gaps: a reader may take one now and expect the next
	}
	close(s.confirms)
}

// SessionEnded is the reason Config.OnBlocked is given when a blocked session ends. The broker did
// not unblock it, and may still block the next session.
const SessionEnded = "session ended"

// setBlocked records whether the broker blocks the connection, and tells Config.OnBlocked of a
// change.
func (s *Session) setBlocked(active bool, reason string) {
	s.blockMu.Lock()
	changed := active != (s.unblock != nil)
	switch {
	case active && s.unblock == nil:
		s.unblock = make(chan struct{})
	case !active && s.unblock != nil:
		close(s.unblock)
		s.unblock = nil
	}
	s.blockMu.Unlock()
	if changed && s.cfg.OnBlocked != nil {
		s.cfg.OnBlocked(active, reason)
	}
}
