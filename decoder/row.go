package decoder

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/wire"
)

// Type OIDs. The server has already validated values of json and jsonb. A uuid id becomes
// Message.ID, an id of any other type Message.MessageID.
const (
	oidJSON  = 114
	oidUUID  = 2950
	oidJSONB = 3802
)

// maxShortString is the longest routing key, message id or exchange name AMQP can carry.
const maxShortString = 255

// rowError keeps the first problem found in a row; decoding goes on to fill the partial message.
type rowError struct {
	column string
	err    error
}

func (e *rowError) set(column string, format string, args ...any) {
	if e.err == nil {
		e.column = column
		e.err = badRow(format, args...)
	}
}

// position is a row's place in the stream. It is its transaction's commit LSN and commit time,
// and the number of inserts before it in the transaction.
type position struct {
	finalLSN   pglogrepl.LSN
	commitTime time.Time
	ordinal    int
	origin     *Origin
}

// message turns the mapped columns of a tuple into a Message. Every field is decoded even after an
// error. So a bad row's Error carries as much of it as possible.
func (rel *relation) message(row []value, pos position, share bool) (wire.Message, error) {
	var m wire.Message
	var bad rowError
	id := rel.id(row, pos, &m, &bad)
	rel.text(row, id, &m, &bad)
	m.Payload = rel.payload(row, share, &bad)
	m.Headers = rel.headers(row, &bad)
	m.CreatedAt = rel.timestamp(row, roleCreatedAt, &bad)
	m.DeliverAt = rel.timestamp(row, roleDeliverAt, &bad)
	if bad.err != nil {
		return wire.Message{}, &Error{MsgID: m.ID, Table: rel.table, Column: bad.column, Partial: m, Err: bad.err}
	}
	return m, nil
}

// get returns the value of the column playing role ro; ok is false if there is no such column.
func (rel *relation) get(row []value, ro role) (v value, ok bool) {
	if s := rel.roles[ro].slot; s >= 0 {
		return row[s], true
	}
	return value{}, false
}

// required returns the value of the column playing role ro. Or it records why there is none: the
// column is missing or NULL.
func (rel *relation) required(row []value, ro role, bad *rowError) ([]byte, bool) {
	c := &rel.roles[ro]
	v, ok := rel.get(row, ro)
	switch {
	case !ok:
		bad.set(c.errColumn(), "%s column is missing", c.label)
		return nil, false
	case v.null:
		bad.set(c.errColumn(), "%s is NULL", c.label)
		return nil, false
	}
	return v.data, true
}

// id sets m.ID from a uuid column or the row's position. Or it returns the text of an id column of
// another type, which becomes m.MessageID.
func (rel *relation) id(row []value, pos position, m *wire.Message, bad *rowError) []byte {
	if rel.mapping.MessageID == wire.IDFromPosition {
		m.ID = pos.origin.PositionID(pos.finalLSN, pos.commitTime, pos.ordinal)
		return nil
	}
	data, ok := rel.required(row, roleID, bad)
	if !ok {
		return nil
	}
	c := &rel.roles[roleID]
	if c.typ != oidUUID {
		checkShortString(c, data, bad)
		return data
	}
	id, err := uuid.ParseBytes(data)
	if err != nil {
		bad.set(c.errColumn(), "%s is not a UUID", c.label)
		return nil
	}
	m.ID = id
	return nil
}

// checkShortString records an empty value, or one too long for AMQP.
func checkShortString(c *column, data []byte, bad *rowError) {
	switch {
	case len(data) == 0:
		bad.set(c.errColumn(), "%s is empty", c.label)
	case len(data) > maxShortString:
		bad.set(c.errColumn(), "%s is %d bytes long, more than %d", c.label, len(data), maxShortString)
	}
}

// text sets the message's strings with one allocation for all of them. They are the event type,
// aggregate, message id, exchange and routing key.
func (rel *relation) text(row []value, id []byte, m *wire.Message, bad *rowError) {
	var et []byte
	if data, ok := rel.required(row, roleEventType, bad); ok {
		et = data
		if len(et) == 0 {
			bad.set(rel.roles[roleEventType].errColumn(), "%s is empty", rel.roles[roleEventType].label)
		}
	}
	at, _ := rel.get(row, roleAggregateType) // NULL or missing: ""
	ai, _ := rel.get(row, roleAggregateID)
	ex := rel.exchange(row, bad)
	keyLen := rel.keyLen(row, bad)
	var b strings.Builder
	b.Grow(len(et) + len(at.data) + len(ai.data) + len(id) + len(ex) + keyLen)
	b.Write(et)
	b.Write(at.data)
	b.Write(ai.data)
	b.Write(id)
	b.Write(ex)
	if keyLen > 0 {
		rel.writeKey(&b, row)
	}
	s := b.String()
	m.EventType, s = s[:len(et)], s[len(et):]
	m.AggregateType, s = s[:len(at.data)], s[len(at.data):]
	m.AggregateID, s = s[:len(ai.data)], s[len(ai.data):]
	if len(id)+len(ex)+keyLen > 0 { // a mapped table's
		m.MessageID, s = s[:len(id)], s[len(id):]
		m.Exchange, m.RoutingKey = s[:len(ex)], s[len(ex):]
	}
}

// exchange returns the row's exchange, if the mapping has an exchange column.
func (rel *relation) exchange(row []value, bad *rowError) []byte {
	if rel.roles[roleExchange].name == "" {
		return nil
	}
	data, ok := rel.required(row, roleExchange, bad)
	if !ok {
		return nil
	}
	checkShortString(&rel.roles[roleExchange], data, bad)
	return data
}

// keyLen returns the length of the routing key the template gives for the row. It returns 0 if
// there is no template or no usable key. A key is unusable when a placeholder's column is missing
// or NULL. It is unusable when it is empty or too long for AMQP too.
func (rel *relation) keyLen(row []value, bad *rowError) int {
	if rel.key == nil {
		return 0
	}
	n := 0
	for _, p := range rel.key {
		switch {
		case p.lit:
			n += len(p.text)
		case p.slot < 0:
			bad.set(p.text, "%s (routing key) column is missing", p.text)
			return 0
		case row[p.slot].null:
			bad.set(p.text, "%s (routing key) is NULL", p.text)
			return 0
		default:
			n += len(row[p.slot].data)
		}
	}
	switch {
	case n == 0:
		bad.set("", "routing key is empty")
		return 0
	case n > maxShortString:
		bad.set("", "routing key is %d bytes long, more than %d", n, maxShortString)
		return 0
	}
	return n
}

func (rel *relation) writeKey(b *strings.Builder, row []value) {
	for _, p := range rel.key {
		if p.lit {
			b.WriteString(p.text)
		} else {
			b.Write(row[p.slot].data)
		}
	}
}

// payload returns the payload, a copy unless share. It is kept even if it is not JSON, for the
// partial message of a bad row.
func (rel *relation) payload(row []value, share bool, bad *rowError) []byte {
	data, ok := rel.required(row, rolePayload, bad)
	if !ok {
		return nil
	}
	p := data[:len(data):len(data)]
	if !share {
		p = make([]byte, len(data))
		copy(p, data)
	}
	c := &rel.roles[rolePayload]
	if c.typ != oidJSON && c.typ != oidJSONB && !json.Valid(p) {
		bad.set(c.errColumn(), "%s is not JSON", c.label)
	}
	return p
}

// timestamp parses the time of role ro: created_at or deliver_at. NULL and a missing column give
// the zero time.
func (rel *relation) timestamp(row []value, ro role, bad *rowError) time.Time {
	v, ok := rel.get(row, ro)
	if !ok || v.null {
		return time.Time{}
	}
	t, ok := parseTimestamp(v.data)
	if !ok {
		c := &rel.roles[ro]
		bad.set(c.errColumn(), "%s is not a timestamp", c.label)
	}
	return t
}
