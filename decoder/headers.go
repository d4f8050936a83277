package decoder

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/walbox/walbox/wire"
)

// headers decodes the headers object. NULL, a missing column and an empty object give nil.
func (rel *relation) headers(row []value, bad *rowError) map[string]any {
	v, ok := rel.get(row, roleHeaders)
	if !ok || v.null {
		return nil
	}
	h, problem := parseHeaders(v.data)
	if problem != "" {
		c := &rel.roles[roleHeaders]
		bad.set(c.errColumn(), "%s %s", c.label, problem)
	}
	return h
}

// parseHeaders decodes a headers object; an empty object gives nil. The result problem says what is
// wrong with data ("is not a JSON object"), or is empty. Numbers become what wire.HeaderNumber
// makes of their text, so none changes on the way. A name with wire.ReservedHeaderPrefix is a
// problem.
func parseHeaders(data []byte) (h map[string]any, problem string) {
	if string(data) == "{}" {
		return nil, ""
	}
	h, ok := flatStrings(data)
	if !ok {
		if h, problem = parseJSONHeaders(data); problem != "" || len(h) == 0 {
			return nil, problem
		}
	}
	return h, reservedName(h)
}

// parseJSONHeaders decodes data with encoding/json, numbers as their text.
func parseJSONHeaders(data []byte) (h map[string]any, problem string) {
	if trimmed := bytes.TrimLeft(data, jsonSpace); len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, "is not a JSON object"
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&h); err != nil {
		return nil, "is not valid JSON"
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, "is not valid JSON"
	}
	for k, v := range h {
		h[k] = wire.HeaderNumbers(v)
	}
	return h, ""
}

// reservedName names the header whose name has the reserved prefix, as a problem. If several do, it
// names the first in byte order.
func reservedName(h map[string]any) string {
	var name string
	for k := range h {
		if wire.ReservedHeader(k) && (name == "" || k < name) {
			name = k
		}
	}
	if name == "" {
		return ""
	}
	return fmt.Sprintf("has %q: names starting with %s are reserved for walbox", name, wire.ReservedHeaderPrefix)
}

const jsonSpace = " \t\r\n"

// flatStrings decodes the common shape of headers several times faster than encoding/json. That
// shape is an object whose values are all strings without escapes ({"traceparent": "00-…"}). It
// gives the same result as json.Unmarshal. ok is false for any other input, valid or not.
func flatStrings(b []byte) (h map[string]any, ok bool) {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return nil, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil, skipSpace(b, i+1) == len(b)
	}
	for {
		key, j, ok := plainString(b, i)
		if !ok {
			return nil, false
		}
		if i = skipSpace(b, j); i == len(b) || b[i] != ':' {
			return nil, false
		}
		value, j, ok := plainString(b, skipSpace(b, i+1))
		if !ok {
			return nil, false
		}
		if h == nil {
			h = make(map[string]any, 1)
		}
		h[key] = value
		switch i = skipSpace(b, j); {
		case i == len(b):
			return nil, false
		case b[i] == '}':
			return h, skipSpace(b, i+1) == len(b)
		case b[i] != ',':
			return nil, false
		}
		i = skipSpace(b, i+1)
	}
}

// plainString reads a JSON string at b[i:] that has no escapes and is valid UTF-8. It returns it
// with the offset after its closing quote.
func plainString(b []byte, i int) (s string, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			if !utf8.Valid(b[i+1 : j]) {
				return "", 0, false
			}
			return string(b[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20:
			return "", 0, false
		}
	}
	return "", 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}
