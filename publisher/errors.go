package publisher

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/wire"
)

var (
	// ErrNacked marks a Confirm for a message the broker refused (basic.nack). An internal error
	// refuses one, and so does a full queue with overflow = reject-publish.
	ErrNacked = errors.New("nacked by the broker")

	// ErrReturned marks a Confirm for a message the broker could not route to any queue
	// (basic.return). The error is a *ReturnError.
	ErrReturned = errors.New("returned by the broker")

	// ErrClosed marks the end of a session: the final Confirm, and every Publish after it. It
	// wraps the cause, an *amqp091.Error when the broker or the network ended the session.
	// It is wire.ErrSessionClosed, so that the relay can tell without importing this package.
	ErrClosed = wire.ErrSessionClosed

	// ErrInvalidMessage marks a message that cannot be published as it stands:
	//   - it cannot be encoded as an AMQP publish, for a body over MaxMessageSize;
	//   - it cannot be encoded for a routing key, message id, exchange or header name over 255
	//     bytes;
	//   - or the exchange it names does not exist.
	//
	// Publishing it again will fail again: it wraps wire.ErrUnpublishable.
	ErrInvalidMessage = fmt.Errorf("invalid message: %w", wire.ErrUnpublishable)
)

// ReturnError is the error of a Confirm for a message the broker returned as unroutable. For it,
// errors.Is(err, ErrReturned) reports true.
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

// brokerAnswered reports whether a failed dial heard an AMQP broker. That broker closed the
// connection with a reply of its own. Or, after it started the handshake, it refused the login, the
// vhost or every SASL mechanism. A peer that closed without speaking AMQP gives a frame error, and
// was not reached. A wrong port does that, and so does a proxy with no broker behind it.
func brokerAnswered(err error) bool {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return false
	}
	return ae.Server || errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrVhost) || errors.Is(err, amqp.ErrSASL)
}
