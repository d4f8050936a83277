package publisher

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/wire"
)

// Header names set on every message, from the outbox row. They win over headers of the same
// name in wire.Message.Headers.
const (
	HeaderAggregateType = "aggregate_type"
	HeaderAggregateID   = "aggregate_id"
)

// ContentType is the content type of every message: the payload is a JSON document.
const ContentType = "application/json"

// Publishing builds the AMQP publishing for m, which must not be nil. The routing key, m.Key(), and
// the exchange go beside it.
//
// Properties:
//   - MessageId is m.AMQPMessageID(): m.MessageID, or else m.ID.
//   - Type is m.EventType.
//   - Timestamp is m.CreatedAt, in whole seconds on the wire.
//   - AppId is appID, ContentType application/json, DeliveryMode persistent.
//   - Body is m.Payload, shared, not copied.
//
// Headers are aggregate_type, aggregate_id, wire.HeaderCommitTime (when known) and every key of
// m.Headers. Their values are made legal in an AMQP table:
//   - strings, bools, float64 and nil pass as they are;
//   - []any becomes a field array and map[string]any a nested table, both converted recursively;
//   - other integers become int64;
//   - a json.Number becomes what wire.HeaderNumber makes of it. That is an int64, a float64 or,
//     where neither is exact, its text;
//   - any other type becomes its fmt.Sprint text.
func Publishing(m *wire.Message, appID string) amqp.Publishing {
	h := make(amqp.Table, len(m.Headers)+3)
	for k, v := range m.Headers {
		h[k] = tableValue(v)
	}
	h[HeaderAggregateType] = m.AggregateType
	h[HeaderAggregateID] = m.AggregateID
	if !m.CommitTime.IsZero() {
		h[wire.HeaderCommitTime] = wire.FormatCommitTime(m.CommitTime)
	}
	return amqp.Publishing{
		Headers:      h,
		ContentType:  ContentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    m.AMQPMessageID(),
		Timestamp:    m.CreatedAt,
		Type:         m.EventType,
		AppId:        appID,
		Body:         m.Payload,
	}
}

// tableValue converts a header value to a type amqp091 encodes faithfully. Plain int is avoided
// on purpose: amqp091 writes it as 32 bits.
func tableValue(v any) any {
	switch v := v.(type) {
	case nil, string, bool, float64, int64, []byte, time.Time, amqp.Decimal:
		return v
	case map[string]any:
		return tableOf(v)
	case amqp.Table:
		return tableOf(v)
	case []any:
		a := make([]any, len(v))
		for i, e := range v {
			a[i] = tableValue(e)
		}
		return a
	case []string:
		a := make([]any, len(v))
		for i, e := range v {
			a[i] = e
		}
		return a
	case map[string]string:
		t := make(amqp.Table, len(v))
		for k, e := range v {
			t[k] = e
		}
		return t
	case float32:
		return float64(v)
	case int:
		return int64(v)
	case int8:
		return int64(v)
	case int16:
		return int64(v)
	case int32:
		return int64(v)
	case uint8:
		return int64(v)
	case uint16:
		return int64(v)
	case uint32:
		return int64(v)
	case uint:
		return uintValue(uint64(v))
	case uint64:
		return uintValue(v)
	case json.Number:
		return wire.HeaderNumber(string(v))
	default:
		return fmt.Sprint(v)
	}
}

func tableOf(m map[string]any) amqp.Table {
	t := make(amqp.Table, len(m))
	for k, v := range m {
		t[k] = tableValue(v)
	}
	return t
}

func uintValue(u uint64) any {
	if u > math.MaxInt64 {
		return strconv.FormatUint(u, 10)
	}
	return int64(u)
}

// frameOverhead is what a content header frame needs besides the properties, rounded up. That is
// the frame's own header and end (8 bytes). And it is the class, weight, body size and property
// flags (14 bytes).
const frameOverhead = 32

// propertiesSize returns how many bytes the properties of msg take in its content header frame. The
// library amqp091 sends that frame whole. A broker closes the connection on a frame over its
// frame_max. Field values of types this package does not produce count as 9 bytes, more than any of
// them takes.
func propertiesSize(msg *amqp.Publishing) int {
	n := 1 + len(msg.ContentType) + 1 + len(msg.ContentEncoding) + 1 + len(msg.CorrelationId) +
		1 + len(msg.ReplyTo) + 1 + len(msg.Expiration) + 1 + len(msg.MessageId) + 1 + len(msg.Type) +
		1 + len(msg.UserId) + 1 + len(msg.AppId) + 2 + 8 // delivery mode, priority, timestamp
	return n + tableSize(msg.Headers)
}

func tableSize(t amqp.Table) int {
	n := 4
	for k, v := range t {
		n += 1 + len(k) + fieldSize(v)
	}
	return n
}

func fieldSize(v any) int {
	switch v := v.(type) {
	case string:
		return 5 + len(v)
	case []byte:
		return 5 + len(v)
	case amqp.Table:
		return 1 + tableSize(v)
	case []any:
		n := 5
		for _, e := range v {
			n += fieldSize(e)
		}
		return n
	default:
		return 9
	}
}

// checkMessage reports what would make amqp091 fail in the middle of writing the publish. Such a
// failure kills the connection: short strings over 255 bytes cause it.
func checkMessage(m *wire.Message) error {
	for _, f := range []struct{ name, value string }{
		{"routing key", m.Key()}, {"event type", m.EventType}, {"message id", m.AMQPMessageID()}, {"exchange", m.Exchange},
	} {
		if len(f.value) > 255 {
			return fmt.Errorf("%w: %s longer than 255 bytes", ErrInvalidMessage, f.name)
		}
	}
	return checkKeys(m.Headers)
}

func checkKeys(h map[string]any) error {
	for k, v := range h {
		if len(k) > 255 {
			return fmt.Errorf("%w: header name %.20q... longer than 255 bytes", ErrInvalidMessage, k)
		}
		if err := checkValue(v); err != nil {
			return err
		}
	}
	return nil
}

func checkValue(v any) error {
	switch v := v.(type) {
	case map[string]any:
		return checkKeys(v)
	case amqp.Table:
		return checkKeys(v)
	case map[string]string:
		for k := range v {
			if len(k) > 255 {
				return fmt.Errorf("%w: header name %.20q... longer than 255 bytes", ErrInvalidMessage, k)
			}
		}
	case []any:
		for _, e := range v {
			if err := checkValue(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// Headers of a parked message.
const (
	HeaderParkReason     = "x-walbox-reason"
	HeaderParkTable      = "x-walbox-table"
	HeaderParkLSN        = "x-walbox-lsn"
	HeaderParkEventType  = "x-walbox-event-type"
	HeaderParkExchange   = "x-walbox-exchange"    // the row's own exchange, if it has one
	HeaderParkRoutingKey = "x-walbox-routing-key" // the row's own routing key, if it has one
	HeaderParkParkedAt   = "x-walbox-parked-at"   // when it was parked, a timestamp
	HeaderParkSize       = "x-walbox-size"        // the payload's size in bytes, kept or not
	HeaderParkHeaders    = "x-walbox-headers"     // the row's own headers as JSON text; their size if too large
	HeaderParkDatabase   = "x-walbox-database"    // the row's database, wire.ParkedBy; absent where unknown
)

// The content type and type of a parked message.
const (
	parkedContentType = "application/octet-stream"
	parkedType        = "walbox.parked"
)

// maxParkedHeaders bounds the JSON text of a parked row's own headers. Larger ones are left out.
const maxParkedHeaders = 16 << 10

// ParkedPublishing builds the publishing for a parked message. It holds:
//   - the row's id, type, timestamp and payload, as far as they were decoded; the payload is
//     dropped if over maxBody;
//   - its aggregate headers;
//   - headers naming the reason, the table and the WAL position;
//   - the row's own exchange and routing key, if it has them;
//   - when it was parked, and the payload's size; its commit time, when known;
//   - the row's own headers as JSON text, if it has any and they fit.
//
// The row's own headers are not headers of the parked copy: they may be what made it unpublishable.
func ParkedPublishing(p *wire.Parked, appID string, maxBody int) amqp.Publishing {
	m := &p.Message
	body := m.Payload
	if len(body) > maxBody {
		body = nil
	}
	size := p.Size
	if size == 0 {
		size = len(m.Payload)
	}
	h := amqp.Table{
		HeaderParkParkedAt:  time.Now().UTC(),
		HeaderParkSize:      int64(size),
		HeaderAggregateType: truncate(m.AggregateType),
		HeaderAggregateID:   truncate(m.AggregateID),
		HeaderParkReason:    truncate(p.Reason),
		HeaderParkTable:     p.Table,
		HeaderParkLSN:       p.LSN,
		HeaderParkEventType: truncate(m.EventType),
	}
	if m.Exchange != "" {
		h[HeaderParkExchange] = truncate(m.Exchange)
	}
	if m.RoutingKey != "" {
		h[HeaderParkRoutingKey] = truncate(m.RoutingKey)
	}
	if p.Database != "" {
		h[HeaderParkDatabase] = truncate(p.Database)
	}
	if !m.CommitTime.IsZero() {
		h[wire.HeaderCommitTime] = wire.FormatCommitTime(m.CommitTime)
	}
	if len(m.Headers) > 0 {
		b, err := json.Marshal(m.Headers)
		switch {
		case err != nil:
		case len(b) <= maxParkedHeaders:
			h[HeaderParkHeaders] = string(b)
		default:
			h[HeaderParkHeaders] = int64(len(b)) // too large to keep: only their size
		}
	}
	return amqp.Publishing{
		Headers:      h,
		ContentType:  parkedContentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    truncate255(m.AMQPMessageID()),
		Timestamp:    m.CreatedAt,
		Type:         parkedType,
		AppId:        appID,
		Body:         body,
	}
}

// truncate255 keeps a short string property to the 255 bytes AMQP can carry.
func truncate255(s string) string {
	if len(s) > 255 {
		return s[:255]
	}
	return s
}

// truncate keeps a header value to a size any broker accepts.
func truncate(s string) string {
	const max = 4096
	if len(s) > max {
		return s[:max]
	}
	return s
}
