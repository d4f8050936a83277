package publisher

import (
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/wire"
)

// turnSession is a session with n messages in flight and no connection, whose notifications a
// test queues by hand.
func turnSession(n int) *Session {
	s := &Session{
		acks:     make(chan amqp.Confirmation, 8),
		returns:  make(chan amqp.Return, 8),
		confirms: make(chan wire.Confirm, 8),
		dead:     make(chan struct{}),
	}
	for tag := 1; tag <= n; tag++ {
		s.unacked = append(s.unacked, outgoing{id: string(rune('a' + tag)), seq: uint64(tag)})
	}
	s.published = uint64(n)
	s.tr.acks, s.tr.returns = s.acks, s.returns
	return s
}

// The acks waiting behind the first are judged in the same turn, in order, with one time.
func TestOnAckJudgesTheWaitingAcksInOneTurn(t *testing.T) {
	s := turnSession(3)
	s.acks <- amqp.Confirmation{DeliveryTag: 2, Ack: true}
	s.acks <- amqp.Confirmation{DeliveryTag: 3, Ack: true}
	s.onAck(amqp.Confirmation{DeliveryTag: 1, Ack: true}, true)
	if len(s.confirms) != 3 || len(s.acks) != 0 {
		t.Fatalf("%d confirms, %d acks left; want 3 and 0", len(s.confirms), len(s.acks))
	}
	var at time.Time
	for want := uint64(1); want <= 3; want++ {
		c := <-s.confirms
		if want == 1 {
			at = c.At
		}
		if c.Seq != want || c.Err != nil || !c.At.Equal(at) {
			t.Fatalf("confirm %+v, want seq %d, no error, the turn's time", c, want)
		}
	}
}

// A return that matches nothing in flight ends the session while acks wait: the session's last
// verdict (sequence 0, the failure) is the last one it gives; no ack is judged after it.
func TestOnAckGivesNoVerdictAfterTheLast(t *testing.T) {
	s := turnSession(2)
	s.returns <- amqp.Return{MessageId: "not in flight", ReplyCode: 312}
	s.acks <- amqp.Confirmation{DeliveryTag: 2, Ack: true}
	s.onAck(amqp.Confirmation{DeliveryTag: 1, Ack: true}, true)
	if len(s.confirms) != 1 {
		t.Fatalf("%d confirms, want only the session's last", len(s.confirms))
	}
	if c := <-s.confirms; c.Seq != 0 || c.Err == nil {
		t.Fatalf("confirm %+v, want sequence 0 with the failure", c)
	}
}

// Only RabbitMQ's refusal for size marks a closed session as too large; other 406s do not.
func TestClosedByTellsTooLargeFromOther406s(t *testing.T) {
	for _, tt := range []struct {
		reason string
		want   bool
	}{
		{"PRECONDITION_FAILED - message size 20971532 is larger than configured max size 16777216", true},
		{"PRECONDITION_FAILED - message size 600000000 is larger than max size 536870912", true},
		{"PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'x'", false},
	} {
		err := closedBy(&amqp.Error{Code: amqp.PreconditionFailed, Reason: tt.reason})
		var tl *wire.TooLargeError
		if got := errors.As(err, &tl); got != tt.want || !errors.Is(err, ErrClosed) {
			t.Errorf("%q: too large %v, want %v (error %v)", tt.reason, got, tt.want, err)
		}
	}
	var tl *wire.TooLargeError
	if errors.As(closedBy(&amqp.Error{Code: amqp.NotFound, Reason: "message size 1 is larger than max size 0"}), &tl) {
		t.Error("a 404 taken for a refusal for size")
	}
}
