package consumer

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/consumer/internal/handling"
)

// MessageError reports a message whose handling failed. OnError receives it; Run goes on.
type MessageError struct {
	MessageID string
	// Attempt is the attempt that failed, 1-based.
	Attempt int
	// Retry says a later attempt is scheduled.
	Retry bool
	// DeadLettered is true when the message went to the dead-letter queue. With both it and
	// Retry false, the consumer tries the message again after a pause (a database error).
	DeadLettered bool
	// Held is true when a partitioned consumer's message failed for good. It heads its
	// aggregate's hold, with the aggregate's later messages behind it, until Release or Skip.
	Held bool
	Err  error
}

func (e *MessageError) Error() string {
	switch {
	case e.DeadLettered:
		return fmt.Sprintf("message %s: attempt %d: dead-lettered: %v", e.MessageID, e.Attempt, e.Err)
	case e.Held:
		return fmt.Sprintf("message %s: attempt %d: held until released: %v", e.MessageID, e.Attempt, e.Err)
	case e.Retry:
		return fmt.Sprintf("message %s: attempt %d: will retry: %v", e.MessageID, e.Attempt, e.Err)
	}
	return fmt.Sprintf("message %s: attempt %d: %v", e.MessageID, e.Attempt, e.Err)
}

func (e *MessageError) Unwrap() error { return e.Err }

// ErrMissingMessageID is the reason given for a message without a message-id, which is
// dead-lettered unhandled.
var ErrMissingMessageID = errors.New("missing message id")

// Fatal reports whether err is one Run does not retry. The broker refused access, or the
// declared topology conflicts with what exists. Or the database rejected the consumer's own
// statements as wrong: a missing processed table, no privilege. These need a change of
// configuration.
func Fatal(err error) bool {
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) {
		switch amqpErr.Code {
		case amqp.AccessRefused, amqp.PreconditionFailed, amqp.NotAllowed:
			return true
		}
	}
	return handling.IsFatal(err)
}
