package decoder

import (
	"fmt"
	"strings"

	"github.com/walbox/walbox/wire"
)

// role is a part of a message that a column provides.
type role uint8

const (
	roleID role = iota
	roleEventType
	rolePayload
	roleAggregateType
	roleAggregateID
	roleHeaders
	roleCreatedAt
	roleDeliverAt
	roleExchange
	numRoles
)

// roleNames are the names of the roles in errors: the default table's column names.
var roleNames = [numRoles]string{
	roleID:            wire.ColID,
	roleEventType:     wire.ColEventType,
	rolePayload:       wire.ColPayload,
	roleAggregateType: wire.ColAggregateType,
	roleAggregateID:   wire.ColAggregateID,
	roleHeaders:       wire.ColHeaders,
	roleCreatedAt:     wire.ColCreatedAt,
	roleDeliverAt:     wire.ColDeliverAt,
	roleExchange:      "exchange",
}

// column is the column that plays a role in a relation.
type column struct {
	name  string // "" if the mapping has none for the role
	label string // its name in error texts: "kind (event_type)", "payload", or the role's name
	slot  int    // index in the decoded row, or -1 if the relation has no such column
	typ   uint32 // type OID
}

// errColumn is the column an Error names: the column, or else the role.
func (c *column) errColumn() string {
	if c.name != "" {
		return c.name
	}
	return c.label
}

// keyPart is a piece of the routing key template: literal text, or a column's value.
type keyPart struct {
	text string // the literal text, or the column name
	slot int    // the column's index in the decoded row; -1 for a missing column; unused for literals
	lit  bool
}

// relation is the latest Relation message for one relation id, resolved against its mapping once.
// So decoding a row only indexes.
type relation struct {
	table   string        // "schema.name"
	mapping *wire.Mapping // nil: not one of the configured outbox tables
	columns []string      // column names, in tuple order
	types   []uint32      // column type OIDs, in tuple order
	slots   []int         // for each column, its index in the decoded row, or -1 if unread
	nslots  int           // number of columns read
	roles   [numRoles]column
	key     []keyPart // the routing key template; nil for none
}

// decodeRelation parses a Relation message and replaces the cache entry for its id. Columns are
// mapped by name, so a table altered mid-stream decodes by its latest definition.
func (d *Decoder) decodeRelation(r *reader) error {
	id := r.uint32()
	schema := r.cstring()
	name := r.cstring()
	r.uint8() // replica identity
	n := int(r.uint16())
	if !r.ok() {
		return malformed("truncated relation message")
	}
	// Each column takes at least 10 bytes: do not let a garbled count allocate more.
	capacity := min(n, r.remaining()/10)
	columns, types := make([]string, 0, capacity), make([]uint32, 0, capacity)
	for i := 0; i < n && r.ok(); i++ {
		r.uint8() // flags
		col := r.cstring()
		typ := r.uint32()
		r.uint32() // type modifier
		columns = append(columns, string(col))
		types = append(types, typ)
	}
	if !r.done() {
		return &Error{Table: string(schema) + "." + string(name), Err: malformed("truncated or overlong relation message")}
	}
	rel, err := d.newRelation(schema, name, columns, types)
	if err != nil {
		return err
	}
	d.rels[id] = rel
	return nil
}

// newRelation resolves a table's columns, in tuple order, against its mapping.
func (d *Decoder) newRelation(schema, name []byte, columns []string, types []uint32) (*relation, error) {
	i := d.mappingIndex(schema, name)
	rel := &relation{
		table:   string(schema) + "." + string(name),
		columns: columns,
		types:   types,
	}
	if i >= 0 {
		rel.mapping = &d.maps[i]
	}
	if err := d.checkColumns(rel, i); err != nil {
		return nil, err
	}
	rel.resolve()
	return rel, nil
}

func (d *Decoder) mappingIndex(schema, name []byte) int {
	for i := range d.maps {
		if t := d.maps[i].Table; string(schema) == t.Schema && string(name) == t.Name {
			return i
		}
	}
	return -1
}

// checkColumns checks an outbox table's announced columns against its mapping, the i-th. There is
// none if i < 0. The relay does the same at the start of every session. A column renamed or dropped
// mid-stream is a configuration error that stops the relay. It is not a bad row in every insert
// that follows. The caller found i by schema and name. The name rel.table cannot be split again: a
// quoted schema name may hold a dot.
func (d *Decoder) checkColumns(rel *relation, i int) error {
	if i < 0 {
		return nil
	}
	m := d.given[i]
	// A default optional column may be missing, named or not: the table may lack it.
	for _, f := range []struct {
		col *string
		def string
	}{{&m.AggregateType, wire.ColAggregateType}, {&m.AggregateID, wire.ColAggregateID},
		{&m.Headers, wire.ColHeaders}, {&m.CreatedAt, wire.ColCreatedAt}, {&m.DeliverAt, wire.ColDeliverAt}} {
		if *f.col == f.def {
			*f.col = ""
		}
	}
	cols := make(map[string]string, len(rel.columns))
	for _, c := range rel.columns {
		cols[c] = ""
	}
	if err := m.CheckColumns(cols); err != nil {
		return &Error{Table: rel.table, Err: fmt.Errorf("%w: %v", ErrSchemaDrift, err)}
	}
	return nil
}

// resolve finds the columns of the mapping's roles and of the routing key template. It gives each
// column read a slot in the decoded row. A column that plays several roles is read once.
func (rel *relation) resolve() {
	rel.slots = make([]int, len(rel.columns))
	for i := range rel.slots {
		rel.slots[i] = -1
	}
	m := rel.mapping
	if m == nil {
		return
	}
	names := [numRoles]string{
		roleEventType: m.EventType, rolePayload: m.Payload, roleAggregateType: m.AggregateType,
		roleAggregateID: m.AggregateID, roleHeaders: m.Headers, roleCreatedAt: m.CreatedAt,
		roleDeliverAt: m.DeliverAt,
		roleExchange:  m.ExchangeColumn,
	}
	if m.MessageID != wire.IDFromPosition {
		names[roleID] = m.ID
	}
	for ro, name := range names {
		c := column{label: roleNames[ro], slot: -1}
		if name != "" && name != wire.Absent {
			c.name = name
			if name != roleNames[ro] {
				c.label = name + " (" + roleNames[ro] + ")"
			}
			c.slot, c.typ = rel.slotOf(name)
		}
		rel.roles[ro] = c
	}
	rel.key = rel.template(m.RoutingKey)
}

// template splits the routing key template into literal text and {column} placeholders. It does so
// as wire.Mapping.Placeholders does: a brace without its pair is literal text.
func (rel *relation) template(tmpl string) []keyPart {
	var parts []keyPart
	for rest := tmpl; rest != ""; {
		i := strings.IndexByte(rest, '{')
		j := -1
		if i >= 0 {
			j = strings.IndexByte(rest[i:], '}')
		}
		if j < 0 {
			return append(parts, keyPart{text: rest, lit: true})
		}
		if i > 0 {
			parts = append(parts, keyPart{text: rest[:i], lit: true})
		}
		name := rest[i+1 : i+j]
		slot, _ := rel.slotOf(name)
		parts = append(parts, keyPart{text: name, slot: slot})
		rest = rest[i+j+1:]
	}
	return parts
}

// slotOf returns the slot of the named column, giving it one if it has none, and its type. It
// returns -1 if the relation has no such column.
func (rel *relation) slotOf(name string) (slot int, typ uint32) {
	for i, c := range rel.columns {
		if c != name {
			continue
		}
		if rel.slots[i] < 0 {
			rel.slots[i] = rel.nslots
			rel.nslots++
		}
		return rel.slots[i], rel.types[i]
	}
	return -1, 0
}

// value is one column of a tuple; data aliases the message.
type value struct {
	null bool
	data []byte
}

// readTuple reads a TupleData into row, which has a slot for each column the relation reads.
func readTuple(r *reader, rel *relation, row []value) error {
	n := int(r.uint16())
	if !r.ok() {
		return &Error{Table: rel.table, Err: malformed("truncated tuple")}
	}
	if n != len(rel.slots) {
		return &Error{Table: rel.table, Err: malformed("tuple has %d columns, relation has %d", n, len(rel.slots))}
	}
	for i, slot := range rel.slots {
		var v value
		switch kind := r.uint8(); kind {
		case 'n':
			v.null = true
		case 't':
			v.data = r.bytes32()
		case 'u':
			return columnError(rel, i, malformed("unchanged TOAST value in an insert"))
		case 'b':
			return columnError(rel, i, malformed("binary value, but text format was requested"))
		default:
			if !r.ok() {
				break
			}
			return columnError(rel, i, malformed("unknown tuple column kind %q", []byte{kind}))
		}
		if !r.ok() {
			return columnError(rel, i, malformed("truncated tuple"))
		}
		if slot >= 0 {
			row[slot] = v
		}
	}
	return nil
}

func columnError(rel *relation, i int, err error) error {
	return &Error{Table: rel.table, Column: rel.columns[i], Err: err}
}

// skipTuple checks the structure of a TupleData it does not need.
func skipTuple(r *reader) error {
	n := int(r.uint16())
	for i := 0; i < n && r.ok(); i++ {
		switch kind := r.uint8(); kind {
		case 'n', 'u':
		case 't', 'b':
			r.bytes32()
		default:
			if r.ok() {
				return malformed("unknown tuple column kind %q", []byte{kind})
			}
		}
	}
	if !r.ok() {
		return malformed("truncated tuple")
	}
	return nil
}
