package wire

import (
	"fmt"
	"strings"
)

// IDSource says where a message's id comes from.
type IDSource string

const (
	// IDFromColumn takes the id from the mapped id column (a uuid, or any type as text).
	IDFromColumn IDSource = "column"
	// IDFromPosition derives a UUID for tables without a usable id column. It derives it from the
	// server's system identifier and timeline, and the transaction's commit position and commit
	// time. The row's place in the transaction counts too (decoder.Origin.PositionID). The UUID is
	// the same on every replay. It is another after a failover or a point-in-time recovery that
	// reuses the position. It is another after a restored copy reuses it too: the copy commits later.
	IDFromPosition IDSource = "position"
)

// Mapping says how the columns of an outbox table become a message. The zero value of every field
// but Table selects the default table's contract (see the Col constants).
type Mapping struct {
	Table Table

	// Column names. "-" means the table has no such column. That is allowed for AggregateType,
	// AggregateID, Headers, CreatedAt and DeliverAt. It is allowed for ID only with IDFromPosition.
	ID, AggregateType, AggregateID, EventType, Payload, Headers, CreatedAt string

	// DeliverAt names a timestamptz column holding when each row is to leave; NULL leaves at once.
	DeliverAt string

	// ExchangeColumn names a column holding each row's exchange; empty publishes every row to the
	// relay's exchange.
	ExchangeColumn string

	// RoutingKey is a template for the routing key: literal text with {column} placeholders. Each
	// is replaced by that column's text value, e.g. "{aggregate_type}.{event_type}". Empty means
	// the event type.
	RoutingKey string

	// MessageID is where the message id comes from (default IDFromColumn).
	MessageID IDSource
}

// WithDefaults fills in the default column names: Mapping{Table: t}.WithDefaults() is the
// contract of the table `walbox migrate` creates.
func (m Mapping) WithDefaults() Mapping {
	def := func(s *string, name string) {
		if *s == "" {
			*s = name
		}
	}
	if m.Table == (Table{}) {
		m.Table = DefaultTable
	}
	def(&m.ID, ColID)
	def(&m.AggregateType, ColAggregateType)
	def(&m.AggregateID, ColAggregateID)
	def(&m.EventType, ColEventType)
	def(&m.Payload, ColPayload)
	def(&m.Headers, ColHeaders)
	def(&m.CreatedAt, ColCreatedAt)
	def(&m.DeliverAt, ColDeliverAt)
	if m.MessageID == "" {
		m.MessageID = IDFromColumn
	}
	return m
}

// Absent is the column name that says the table has no such column.
const Absent = "-"

// Columns returns the columns the mapping reads, by the role they play, absent ones left out. The
// roles are "id", "event_type", ..., "exchange", and "routing_key" for every placeholder of the
// template.
func (m Mapping) Columns() map[string][]string {
	m = m.WithDefaults()
	out := map[string][]string{}
	add := func(role, col string) {
		if col != "" && col != Absent {
			out[col] = append(out[col], role)
		}
	}
	if m.MessageID == IDFromColumn {
		add("id", m.ID)
	}
	add("aggregate_type", m.AggregateType)
	add("aggregate_id", m.AggregateID)
	add("event_type", m.EventType)
	add("payload", m.Payload)
	add("headers", m.Headers)
	add("created_at", m.CreatedAt)
	add("deliver_at", m.DeliverAt)
	add("exchange", m.ExchangeColumn)
	for _, p := range m.placeholders() {
		add("routing_key", p)
	}
	return out
}

// allOf reports whether every role is set in ok.
func allOf(roles []string, ok map[string]bool) bool {
	for _, r := range roles {
		if !ok[r] {
			return false
		}
	}
	return true
}

// placeholders returns the column names the routing key template refers to.
func (m Mapping) placeholders() []string {
	var out []string
	rest := m.RoutingKey
	for {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			return out
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return out
		}
		out = append(out, rest[i+1:i+j])
		rest = rest[i+j+1:]
	}
}

// Validate checks the mapping on its own (not against a table: see CheckColumns).
func (m Mapping) Validate() error {
	m = m.WithDefaults()
	switch {
	case m.MessageID != IDFromColumn && m.MessageID != IDFromPosition:
		return fmt.Errorf("table %s: message id source %q: want %q or %q", m.Table, m.MessageID, IDFromColumn, IDFromPosition)
	case m.ID == Absent && m.MessageID == IDFromColumn:
		return fmt.Errorf("table %s: no id column: set the message id source to %q", m.Table, IDFromPosition)
	case m.EventType == Absent, m.Payload == Absent:
		return fmt.Errorf("table %s: the event type and payload columns are required", m.Table)
	case strings.Count(m.RoutingKey, "{") != strings.Count(m.RoutingKey, "}"):
		return fmt.Errorf("table %s: routing key template %q: unbalanced braces", m.Table, m.RoutingKey)
	}
	for _, p := range m.placeholders() {
		if p == "" {
			return fmt.Errorf("table %s: routing key template %q: empty placeholder", m.Table, m.RoutingKey)
		}
	}
	return nil
}

// CheckColumns checks the mapping against the table's actual columns and names the first column
// that is missing. The columns map name to type name, as format_type gives them.
//
// The default contract has optional columns: aggregate_type, aggregate_id, headers, created_at,
// deliver_at.
// They may be missing when the mapping leaves them at their defaults. The table may have been
// created without them, or they may have been dropped. A row then simply lacks them. A column the
// mapping names explicitly must exist.
func (m Mapping) CheckColumns(actual map[string]string) error {
	if err := m.Validate(); err != nil {
		return err
	}
	mayLack := map[string]bool{
		"aggregate_type": m.AggregateType == "", "aggregate_id": m.AggregateID == "",
		"headers": m.Headers == "", "created_at": m.CreatedAt == "", "deliver_at": m.DeliverAt == "",
	}
	for col, roles := range m.Columns() {
		if _, ok := actual[col]; ok || allOf(roles, mayLack) {
			continue
		}
		return fmt.Errorf("table %s has no column %q (mapped as %s)", m.WithDefaults().Table, col, strings.Join(roles, ", "))
	}
	// A timestamp without time zone carries no offset. Read as UTC, a writer's local time would leave
	// early or late by its zone's offset.
	if col := m.WithDefaults().DeliverAt; col != Absent && strings.HasSuffix(actual[col], "without time zone") {
		return fmt.Errorf("table %s: column %q (deliver_at) is %s: its time zone is unknown, so a message could leave early; "+
			"ALTER TABLE %s ALTER COLUMN %s TYPE timestamptz USING %s AT TIME ZONE '<the writers' zone>'",
			m.WithDefaults().Table, col, actual[col], m.WithDefaults().Table, col, col)
	}
	return nil
}
