package wire

import (
	"time"

	"github.com/google/uuid"
)

// Message is one outbox row, as written by a producer and as published by the relay.
type Message struct {
	// ID identifies the message. It becomes the AMQP MessageId; consumers deduplicate on it.
	ID uuid.UUID
	// AggregateType and AggregateID name the entity the event is about ("order", "42").
	AggregateType string
	AggregateID   string
	// EventType is the event's name ("order.created"). It becomes the routing key and the AMQP Type.
	EventType string
	// Payload is the message body, a JSON document.
	Payload []byte
	// Headers are extra AMQP headers (a W3C traceparent, say). Values are JSON values. They are
	// string, int64, float64, bool, nil, []any or map[string]any. As decoded by the relay, a number
	// is what HeaderNumber makes of its text. Names starting with ReservedHeaderPrefix are
	// walbox's.
	Headers map[string]any
	// CreatedAt is when the row was written; it becomes the AMQP Timestamp.
	CreatedAt time.Time
	// DeliverAt, unless zero, is when the message is to leave. The relay holds a message due after
	// its transaction's commit time in its schedule until then (docs/outbox.md#scheduled-delivery).
	DeliverAt time.Time

	// Set by the relay from a table's Mapping; empty for the default table.

	// MessageID is the AMQP MessageId when the id is not a UUID (a bigint key, say); empty means
	// ID.String().
	MessageID string
	// RoutingKey overrides the routing key (default EventType).
	RoutingKey string
	// Exchange overrides the exchange the relay publishes to.
	Exchange string
	// CommitTime is when the row's transaction committed; zero when unknown. It becomes the
	// header HeaderCommitTime.
	CommitTime time.Time
}

// AMQPMessageID returns the id the message carries on the wire.
func (m *Message) AMQPMessageID() string {
	if m.MessageID != "" {
		return m.MessageID
	}
	return m.ID.String()
}

// Key returns the routing key: RoutingKey, or else EventType.
func (m *Message) Key() string {
	if m.RoutingKey != "" {
		return m.RoutingKey
	}
	return m.EventType
}
