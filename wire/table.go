package wire

import (
	"fmt"
	"strings"
)

// Column names of the default outbox table (migrations/ creates it).
const (
	ColID            = "id"
	ColAggregateType = "aggregate_type"
	ColAggregateID   = "aggregate_id"
	ColEventType     = "event_type"
	ColPayload       = "payload"
	ColHeaders       = "headers"
	ColCreatedAt     = "created_at"
	ColDeliverAt     = "deliver_at"
)

// The tableless outbox: walbox migrate creates the function EmitFunction in the outbox table's
// schema. It writes a message as a transactional logical decoding message instead of as a row. The
// message carries the prefix DefaultMessagePrefix, or the one migrate was given.
const (
	EmitFunction         = "walbox_emit"
	DefaultMessagePrefix = "walbox"
)

// DefaultTable is the outbox table walbox uses unless told otherwise.
var DefaultTable = Table{Schema: "public", Name: "outbox"}

// Defaults the parts of walbox share. Migrate creates the slot and the publication; the relays
// stream them. The window bounds the messages in flight, in the relay and in its publisher.
const (
	DefaultSlot        = "walbox"
	DefaultPublication = "walbox"
	DefaultWindow      = 1024
)

// Table names an outbox table.
type Table struct {
	Schema string
	Name   string
}

// ParseTable parses "schema.name" or "name" (schema public). Names are taken as written, without
// SQL quoting or case folding.
func ParseTable(s string) (Table, error) {
	schema, name, ok := strings.Cut(s, ".")
	if !ok {
		schema, name = "public", s
	}
	if schema == "" || name == "" || strings.Contains(name, ".") {
		return Table{}, fmt.Errorf("table %q: want schema.name or name", s)
	}
	return Table{Schema: schema, Name: name}, nil
}

// String returns "schema.name", unquoted.
func (t Table) String() string { return t.Schema + "." + t.Name }

// Quoted returns the table name quoted for use in SQL.
func (t Table) Quoted() string { return quoteIdent(t.Schema) + "." + quoteIdent(t.Name) }

// EmitFunction returns the name of the table's emit function (EmitFunction in the table's schema),
// quoted for use in SQL.
func (t Table) EmitFunction() string { return quoteIdent(t.Schema) + "." + quoteIdent(EmitFunction) }

// quoteIdent quotes an SQL identifier as pgx.Identifier.Sanitize does: NUL bytes dropped, double
// quotes doubled. So this package needs no database driver.
func quoteIdent(s string) string {
	s = strings.ReplaceAll(s, "\x00", "")
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
