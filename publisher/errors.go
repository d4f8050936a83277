package publisher

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/wire"
)

var (
	// ErrNacked marks a Confirm for a message the broker refused (basic.nack): an internal error,
	// or a full queue with overflow = reject-publish.
	ErrNacked = errors.New("nacked by the broker")

	// ErrReturned marks a Confirm for a message the broker could not route to any queue
	// (basic.return). The error is a *ReturnError.
	ErrReturned = errors.New("returned by the broker")

	// ErrClosed marks the end of a session: the final Confirm, and every Publish after it. It
	// wraps the cause, an *amqp091.Error when the broker or the network ended the session.
	// It is wire.ErrSessionClosed, so that the relay can tell without importing this package.
	ErrClosed = wire.ErrSessionClosed

	// ErrInvalidMessage marks a message that cannot be published as it stands: it cannot be
	// encoded as an AMQP publish (a routing key, message id, exchange or header name over 255
	// bytes, a body over MaxMessageSize), or the exchange it names does not exist. Publishing it
	// again will fail again: it wraps wire.ErrUnpublishable.
	ErrInvalidMessage = fmt.Errorf("invalid message: %w", wire.ErrUnpublishable)
)

// ReturnError is the error of a Confirm for a message the broker returned as unroutable.
// errors.Is(err, ErrReturned) reports true for it.
type ReturnError struct {
	MessageID string // the AMQP MessageId, wire.Message.AMQPMessageID()
	Code      uint16 // the reply code, 312 NO_ROUTE for an unroutable mandatory message
	Text      string // the reply text
}

func (e *ReturnError) Error() string {
	return fmt.Sprintf("message %s returned: %d %s", e.MessageID, e.Code, e.Text)
}

// Unwrap returns ErrReturned.
func (e *ReturnError) Unwrap() error { return ErrReturned }

// answered marks a dial error after the broker answered (wire.ErrServerAnswered).
type answered struct{ err error }

func (a answered) Error() string        { return a.err.Error() }
func (a answered) Unwrap() error        { return a.err }
func (a answered) Is(target error) bool { return target == wire.ErrServerAnswered }

// brokerAnswered reports whether a failed dial heard an AMQP broker: one that closed the
// connection with a reply of its own, or refused the login, the vhost or every SASL mechanism
// after it started the handshake. A peer that closed without speaking AMQP (a wrong port, a
// proxy with no broker behind it) gives a frame error, and was not reached.
func brokerAnswered(err error) bool {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return false
	}
	return ae.Server || errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrVhost) || errors.Is(err, amqp.ErrSASL)
}
