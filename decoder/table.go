package decoder

import (
	"errors"
	"fmt"

	"github.com/walbox/walbox/wire"
)

// ErrNoPosition: rows read from a table, not from the stream, have no commit position. So a mapping
// whose ids come from positions (wire.IDFromPosition) cannot give them their ids.
var ErrNoPosition = errors.New("message ids come from stream positions, which rows read from the table do not have")

// Column is a column of a table as its rows are read: its name and type OID.
type Column struct {
	Name string
	Type uint32
}

// TableRows turns rows read from an outbox table with a query into messages. It makes of them what
// Decode makes of the same rows inserted and decoded from the stream. It uses the same mapping and
// the same checks, and finds the same bad rows. The command walbox recover republishes rows with
// it.
type TableRows struct {
	rel *relation
}

// Rows returns a TableRows for rows of the table schema.name with the given columns. The columns
// are in the order their values will be given. The table must be one of the Decoder's outbox
// tables. Its mapping must not take ids from positions (ErrNoPosition). A column the mapping needs
// but cols lack is an ErrSchemaDrift error, as for a Relation message.
func (d *Decoder) Rows(schema, name string, cols []Column) (*TableRows, error) {
	names, types := make([]string, len(cols)), make([]uint32, len(cols))
	for i, c := range cols {
		names[i], types[i] = c.Name, c.Type
	}
	rel, err := d.newRelation([]byte(schema), []byte(name), names, types)
	if err != nil {
		return nil, err
	}
	switch {
	case rel.mapping == nil:
		return nil, &Error{Table: rel.table, Err: ErrForeignTable}
	case rel.mapping.MessageID == wire.IDFromPosition:
		return nil, &Error{Table: rel.table, Err: ErrNoPosition}
	}
	return &TableRows{rel: rel}, nil
}

// Message returns the message of one row. The slice values holds each column's text, as the
// server's output function writes it, nil for NULL. Timestamps are in the ISO DateStyle. The values
// are in the order of the columns given to Rows. A row that can never become a message is an *Error
// wrapping ErrBadRow. Its Partial holds the decodable part, as from Decode.
func (t *TableRows) Message(values [][]byte) (wire.Message, error) {
	rel := t.rel
	if len(values) != len(rel.slots) {
		return wire.Message{}, &Error{Table: rel.table, Err: fmt.Errorf("%d values for %d columns", len(values), len(rel.slots))}
	}
	row := make([]value, rel.nslots)
	for i, slot := range rel.slots {
		if slot >= 0 {
			row[slot] = value{null: values[i] == nil, data: values[i]}
		}
	}
	return rel.message(row, position{}, false)
}
