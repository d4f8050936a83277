package consumer

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/wire"
)

// Handler handles one message within tx, the transaction that also records the message as
// processed. It must not commit or roll back tx. A nil return commits tx and then acknowledges
// the message. An error (or a panic, recovered) rolls tx back and schedules a retry. After
// Config.MaxAttempts attempts it dead-letters the message instead. The context ctx outlives
// Run's by up to Config.ShutdownTimeout, so that a graceful stop lets the handler finish.
type Handler func(ctx context.Context, tx pgx.Tx, d Delivery) error

// Headers the consumer sets on messages it retries or dead-letters.
const (
	// HeaderAttempts is the number of attempts made so far (an int64). On a retried message it
	// counts the attempts before this one. On a dead-lettered message it counts all of them.
	HeaderAttempts = "x-walbox-attempts"
	// HeaderError is the last handler error (or why the message could not be handled at all),
	// cut to 4 KiB.
	HeaderError = "x-walbox-error"
	// HeaderRoutingKey and HeaderExchange keep where the message was first published. A retried
	// message comes back through the default exchange, with the queue's name as routing key.
	HeaderRoutingKey = "x-walbox-routing-key"
	HeaderExchange   = "x-walbox-exchange"
	// HeaderConsumer names the consumer (Config.ConsumerName) that dead-lettered the message.
	HeaderConsumer = "x-walbox-consumer"
)

// Delivery is one message as the handler sees it.
type Delivery struct {
	// MessageID is the AMQP message-id, the deduplication key.
	MessageID string
	// Type is the AMQP type, the outbox event type.
	Type string
	// RoutingKey is the routing key the message was published with, also on a retry.
	RoutingKey string
	Body       []byte
	Headers    map[string]any
	Timestamp  time.Time
	// CommitTime is when the message's transaction committed, from the header wire.HeaderCommitTime.
	// It is zero when the message has none.
	CommitTime time.Time
	// Redelivered says the broker delivered it before, without an acknowledgement.
	Redelivered bool
	// Attempt is 1 on the first attempt, 2 on the first retry, and so on.
	Attempt int
}

func newDelivery(d *amqp.Delivery) Delivery {
	rk, _ := d.Headers[HeaderRoutingKey].(string)
	if rk == "" {
		rk = d.RoutingKey
	}
	return Delivery{
		MessageID:   d.MessageId,
		Type:        d.Type,
		RoutingKey:  rk,
		Body:        d.Body,
		Headers:     d.Headers,
		Timestamp:   d.Timestamp,
		CommitTime:  CommitTime(d.Headers),
		Redelivered: d.Redelivered,
		Attempt:     attemptsBefore(d.Headers) + 1,
	}
}

// CommitTime reads the header wire.HeaderCommitTime; zero when missing or malformed.
func CommitTime(h map[string]any) time.Time {
	t, _ := wire.ParseCommitTime(h[wire.HeaderCommitTime])
	return t
}

// attemptsBefore reads HeaderAttempts, whatever integer type it arrived as.
func attemptsBefore(h amqp.Table) int {
	switch v := h[HeaderAttempts].(type) {
	case int64:
		return int(v)
	case int32:
		return int(v)
	case int16:
		return int(v)
	case int8:
		return int(v)
	case int:
		return v
	case uint8:
		return int(v)
	case uint16:
		return int(v)
	case uint32:
		return int(v)
	case float64:
		return int(v)
	}
	return 0
}

// republish returns a copy of d to publish to a retry or dead-letter queue, with extra headers.
// The user-id property is dropped: the broker checks it against the publishing user.
func republish(d *amqp.Delivery, extra amqp.Table) amqp.Publishing {
	h := make(amqp.Table, len(d.Headers)+len(extra)+2)
	for k, v := range d.Headers {
		h[k] = v
	}
	if _, ok := h[HeaderRoutingKey]; !ok {
		h[HeaderRoutingKey] = d.RoutingKey
		h[HeaderExchange] = d.Exchange
	}
	for k, v := range extra {
		h[k] = v
	}
	return amqp.Publishing{
		Headers:         h,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}
