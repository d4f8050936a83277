package decoder

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/walbox/walbox/wire"
)

// WithMessagePrefix makes d decode some logical decoding messages as outbox messages; it returns d.
// Those are the messages whose prefix is exactly prefix, as the emit function (wire.EmitFunction)
// writes them. By default, and with an empty prefix, every logical decoding message is skipped. See
// the package documentation for the content.
func (d *Decoder) WithMessagePrefix(prefix string) *Decoder {
	d.prefix = prefix
	return d
}

// WithCanary makes d decode the canary messages of slot as outbox messages; it returns d. Those
// are the logical decoding messages with prefix wire.CanaryPrefix whose aggregate_id is slot. They
// have the emit function's content. Each gets the header wire.HeaderCanary, which no row can carry. Every slot of the database gets every message: the canaries of
// other slots are KindOtherMessage. An empty slot decodes none.
func (d *Decoder) WithCanary(slot string) *Decoder {
	d.canary = slot
	return d
}

// messageVersion is the only version of the content the decoder knows.
const messageVersion = 1

// decodeMessage decodes a logical decoding message: flags (1 = transactional), LSN, prefix,
// content. A transactional message with another prefix is KindOtherMessage; a non-transactional
// one is skipped.
func (d *Decoder) decodeMessage(r *reader) (Event, error) {
	flags := r.uint8()
	r.lsn()
	prefix := r.cstring()
	content := r.bytes32()
	if err := doneOrMalformed(r, "logical decoding"); err != nil {
		return Event{}, err
	}
	if d.canary != "" && string(prefix) == wire.CanaryPrefix && flags&1 != 0 {
		m, bad := emitted(content)
		if bad.err != nil || m.AggregateID != d.canary {
			return Event{Kind: KindOtherMessage}, nil // another relay's, or not walbox's
		}
		m.RoutingKey = wire.CanaryEventType
		m.Headers = map[string]any{wire.HeaderCanary: true} // no producer can set it: consumers tell canaries by it
		return Event{Kind: KindRow, Message: m}, nil
	}
	if d.prefix == "" || string(prefix) != d.prefix {
		if flags&1 != 0 {
			return Event{Kind: KindOtherMessage}, nil
		}
		return Event{}, nil
	}
	m, bad := emitted(content)
	if bad.err == nil && flags&1 == 0 {
		// Sent when it was written, whether or not its transaction went on to commit.
		bad.set("", "not transactional: sent when written, even if its transaction rolled back")
	}
	if bad.err != nil {
		return Event{}, &Error{MsgID: m.ID, Column: bad.column, Partial: m,
			Err: fmt.Errorf("message %s: %w", d.prefix, bad.err)}
	}
	return Event{Kind: KindRow, Message: m}, nil
}

// content is the JSON form of an emitted message. A missing field and null leave a pointer nil;
// a null payload or headers is the JSON text null.
type content struct {
	V             json.RawMessage `json:"v"`
	ID            *string         `json:"id"`
	AggregateType *string         `json:"aggregate_type"`
	AggregateID   *string         `json:"aggregate_id"`
	EventType     *string         `json:"event_type"`
	Payload       json.RawMessage `json:"payload"`
	Headers       json.RawMessage `json:"headers"`
	CreatedAt     *string         `json:"created_at"`
	DeliverAt     *string         `json:"deliver_at"`
}

// emitted decodes the content of an emitted message, with the table's columns' meaning and rules.
// The content is a JSON object with "v" (the version, 1), "id", "aggregate_type", "aggregate_id",
// "event_type", "payload", "headers" and "created_at". Unknown keys are ignored. Like a row, every
// field is decoded even after a problem, for the partial message.
func emitted(data []byte) (wire.Message, rowError) {
	var m wire.Message
	var bad rowError
	var c content
	if trimmed := bytes.TrimLeft(data, jsonSpace); len(trimmed) == 0 || trimmed[0] != '{' {
		bad.set("", "content is not a JSON object")
		return m, bad
	}
	if err := json.Unmarshal(data, &c); err != nil {
		// A value of the wrong type is skipped and named; the other fields are decoded.
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) || te.Field == "" {
			bad.set("", "content is not a JSON object")
			return m, bad
		}
		bad.set(te.Field, "%s is not a string", te.Field)
	}
	if string(c.V) != "1" {
		bad.set("v", "content version %s, want %d", c.V, messageVersion)
	}
	switch {
	case c.ID == nil:
		bad.set("id", "id is missing")
	default:
		if u, err := uuid.Parse(*c.ID); err != nil {
			bad.set("id", "id is not a UUID")
		} else {
			m.ID = u
		}
	}
	m.AggregateType, m.AggregateID = deref(c.AggregateType), deref(c.AggregateID)
	switch {
	case c.EventType == nil:
		bad.set("event_type", "event_type is missing")
	case *c.EventType == "":
		bad.set("event_type", "event_type is empty")
	default:
		m.EventType = *c.EventType
	}
	if c.Payload == nil {
		bad.set("payload", "payload is missing")
	}
	m.Payload = []byte(c.Payload) // json.Unmarshal copied it
	if c.Headers != nil && string(c.Headers) != "null" {
		var problem string
		if m.Headers, problem = parseHeaders(c.Headers); problem != "" {
			bad.set("headers", "headers %s", problem)
		}
	}
	if at := deref(c.CreatedAt); at != "" {
		var ok bool
		if m.CreatedAt, ok = parseTimestamp([]byte(at)); !ok {
			bad.set("created_at", "created_at is not a timestamp")
		}
	}
	if at := deref(c.DeliverAt); at != "" {
		var ok bool
		if m.DeliverAt, ok = parseTimestamp([]byte(at)); !ok {
			bad.set("deliver_at", "deliver_at is not a timestamp")
		}
	}
	return m, bad
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
