package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"unicode/utf8"

	"github.com/walbox/walbox/wire"
)

// ErrInvalid matches (errors.Is) every *ValidationError.
var ErrInvalid = errors.New("invalid outbox message")

// ValidationError says which message of a Write was rejected and why. Nothing was written.
type ValidationError struct {
	Index  int    // position of the message in the Write call
	Field  string // Message field at fault: "ID", "AggregateType", "AggregateID", "EventType", "Payload", "Headers"
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid outbox message %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

func invalid(i int, field, reason string) *ValidationError {
	return &ValidationError{Index: i, Field: field, Reason: reason}
}

// maxShortString is AMQP's limit on a short string: the routing key, the Type property and
// header names.
const maxShortString = 255

// reservedHeaders are set by the relay from the message's columns.
var reservedHeaders = []string{ColAggregateType, ColAggregateID}

// validate checks m against the rules the relay needs to publish it. It returns m's headers encoded
// as JSON, with tp added as "traceparent" unless m sets one. A rejected message would otherwise
// stop the relay, which publishes in order. Or it would fail the transaction later.
func (w *Writer) validate(i int, m *Message, tp string) ([]byte, error) {
	if err := checkText(i, "AggregateType", m.AggregateType, 0); err != nil {
		return nil, err
	}
	if err := checkText(i, "AggregateID", m.AggregateID, 0); err != nil {
		return nil, err
	}
	if err := checkText(i, "EventType", m.EventType, maxShortString); err != nil {
		return nil, err
	}
	switch {
	case len(m.Payload) == 0:
		return nil, invalid(i, "Payload", "empty (want a JSON document)")
	case len(m.Payload) > w.maxPayload:
		return nil, invalid(i, "Payload", fmt.Sprintf("%d bytes, more than the limit of %d", len(m.Payload), w.maxPayload))
	case !json.Valid(m.Payload):
		return nil, invalid(i, "Payload", "not valid JSON")
	case hasNULEscape(m.Payload):
		return nil, invalid(i, "Payload", `contains \u0000, which jsonb cannot store`)
	}
	h, err := encodeHeaders(i, m.Headers, tp)
	if err != nil {
		return nil, err
	}
	if n := len(h) + len(m.AggregateType) + len(m.AggregateID); n > MaxHeaderBytes {
		return nil, invalid(i, "Headers", fmt.Sprintf("%d bytes with the aggregate fields, more than the limit of %d", n, MaxHeaderBytes))
	}
	return h, nil
}

// checkText rejects a string that is empty, or longer than max bytes (max > 0). It rejects one that
// Postgres cannot store as text too.
func checkText(i int, field, s string, max int) error {
	switch {
	case s == "":
		return invalid(i, field, "empty")
	case max > 0 && len(s) > max:
		return invalid(i, field, fmt.Sprintf("%d bytes, more than the limit of %d", len(s), max))
	case !utf8.ValidString(s):
		return invalid(i, field, "not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return invalid(i, field, "contains a NUL byte")
	}
	return nil
}

// encodeHeaders checks the header names and values and encodes them as a JSON object.
func encodeHeaders(i int, headers map[string]any, tp string) ([]byte, error) {
	for _, k := range reservedHeaders {
		if _, ok := headers[k]; ok {
			return nil, invalid(i, "Headers", fmt.Sprintf("%q is reserved: the relay sets it from the message", k))
		}
	}
	for k := range headers {
		if wire.ReservedHeader(k) {
			return nil, invalid(i, "Headers", fmt.Sprintf("%q: names starting with %s are reserved for walbox", k, wire.ReservedHeaderPrefix))
		}
	}
	if err := checkHeaderKeys(i, headers); err != nil {
		return nil, err
	}
	if v, ok := headers[TraceparentHeader]; ok {
		if s, _ := v.(string); !ValidTraceparent(s) {
			return nil, invalid(i, "Headers", fmt.Sprintf("%s %v: want 00-<32 hex>-<16 hex>-<2 hex>", TraceparentHeader, v))
		}
	} else if tp != "" {
		headers = maps.Clone(headers)
		if headers == nil {
			headers = make(map[string]any, 1)
		}
		headers[TraceparentHeader] = tp
	}
	if headers == nil {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(headers)
	if err != nil {
		return nil, invalid(i, "Headers", fmt.Sprintf("not encodable as JSON: %v", err))
	}
	if hasNULEscape(b) {
		return nil, invalid(i, "Headers", "contains a NUL character, which jsonb cannot store")
	}
	return b, nil
}

// hasNULEscape reports whether the valid JSON document b has a string with a NUL character. That is
// written \u0000, and Postgres rejects it in jsonb. Only documents with that text are decoded.
func hasNULEscape(b []byte) bool {
	if !bytes.Contains(b, []byte(`\u0000`)) {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok && strings.IndexByte(s, 0) >= 0 {
			return true
		}
	}
}

// checkHeaderKeys rejects empty names and names longer than an AMQP short string, also in nested
// tables.
func checkHeaderKeys(i int, v any) error {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if k == "" {
				return invalid(i, "Headers", "empty name")
			}
			if len(k) > maxShortString {
				return invalid(i, "Headers", fmt.Sprintf("name of %d bytes, more than the limit of %d", len(k), maxShortString))
			}
			if err := checkHeaderKeys(i, e); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range v {
			if err := checkHeaderKeys(i, e); err != nil {
				return err
			}
		}
	}
	return nil
}
