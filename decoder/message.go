package decoder

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/walbox/walbox/outbox"
)

// WithMessagePrefix makes d decode the logical decoding messages whose prefix is exactly prefix
// as outbox messages, as written by the emit function (outbox.EmitFunction); it returns d. By
// default, and with an empty prefix, every logical decoding message is skipped. See the package
// documentation for the content.
func (d *Decoder) WithMessagePrefix(prefix string) *Decoder {
	d.prefix = prefix
	return d
}

// messageVersion is the only version of the content the decoder knows.
const messageVersion = 1

// decodeMessage decodes a logical decoding message: flags (1 = transactional), LSN, prefix,
// content. A message with another prefix is skipped.
func (d *Decoder) decodeMessage(r *reader) (Event, error) {
	flags := r.uint8()
	r.lsn()
	prefix := r.cstring()
	content := r.bytes32()
	if err := doneOrMalformed(r, "logical decoding"); err != nil {
		return Event{}, err
	}
	if d.prefix == "" || string(prefix) != d.prefix {
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

// emitted decodes the content of an emitted message: a JSON object with "v" (the version, 1),
// "id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers" and "created_at",
// with the table's columns' meaning and rules. Unknown keys are ignored. Like a row, every field
// is decoded even after a problem, for the partial message.
func emitted(content []byte) (outbox.Message, rowError) {
	var m outbox.Message
	var bad rowError
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(content, &fields); err != nil || fields == nil {
		bad.set("", "content is not a JSON object")
		return m, bad
	}
	var v int
	if err := json.Unmarshal(fields["v"], &v); err != nil || v != messageVersion {
		bad.set("v", "content version %s, want %d", fields["v"], messageVersion)
	}
	if id, ok := jsonString(fields, "id", true, &bad); ok {
		if u, err := uuid.Parse(id); err != nil {
			bad.set("id", "id is not a UUID")
		} else {
			m.ID = u
		}
	}
	m.AggregateType, _ = jsonString(fields, "aggregate_type", false, &bad)
	m.AggregateID, _ = jsonString(fields, "aggregate_id", false, &bad)
	if et, ok := jsonString(fields, "event_type", true, &bad); ok {
		m.EventType = et
		if et == "" {
			bad.set("event_type", "event_type is empty")
		}
	}
	if p, ok := fields["payload"]; ok {
		m.Payload = []byte(p) // json.Unmarshal copied it
	} else {
		bad.set("payload", "payload is missing")
	}
	if h, ok := fields["headers"]; ok && string(h) != "null" {
		var problem string
		if m.Headers, problem = parseHeaders(h); problem != "" {
			bad.set("headers", "headers %s", problem)
		}
	}
	if at, ok := jsonString(fields, "created_at", false, &bad); ok && at != "" {
		if m.CreatedAt, ok = parseTimestamp([]byte(at)); !ok {
			bad.set("created_at", "created_at is not a timestamp")
		}
	}
	return m, bad
}

// jsonString returns the string field key; a missing or null field is "" and, if required, a
// problem. ok is false if there is no string.
func jsonString(fields map[string]json.RawMessage, key string, required bool, bad *rowError) (s string, ok bool) {
	raw, present := fields[key]
	if !present || string(raw) == "null" {
		if required {
			bad.set(key, "%s is missing", key)
		}
		return "", false
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		bad.set(key, "%s is not a string", key)
		return "", false
	}
	return s, true
}
