package outbox

import "github.com/walbox/walbox/wire"

// The shared vocabulary, under the names producers have always used. See package wire.

type (
	// Message is wire.Message.
	Message = wire.Message
	// Table is wire.Table.
	Table = wire.Table
	// Mapping is wire.Mapping.
	Mapping = wire.Mapping
	// IDSource is wire.IDSource.
	IDSource = wire.IDSource
)

// Column names of the default outbox table, and the tableless outbox's names; see package wire.
const (
	ColID            = wire.ColID
	ColAggregateType = wire.ColAggregateType
	ColAggregateID   = wire.ColAggregateID
	ColEventType     = wire.ColEventType
	ColPayload       = wire.ColPayload
	ColHeaders       = wire.ColHeaders
	ColCreatedAt     = wire.ColCreatedAt

	EmitFunction         = wire.EmitFunction
	DefaultMessagePrefix = wire.DefaultMessagePrefix

	Absent = wire.Absent

	IDFromColumn   = wire.IDFromColumn
	IDFromPosition = wire.IDFromPosition
)

// DefaultTable is wire.DefaultTable.
var DefaultTable = wire.DefaultTable

// ParseTable is wire.ParseTable.
func ParseTable(s string) (Table, error) { return wire.ParseTable(s) }

// DefaultMapping is wire.DefaultMapping.
func DefaultMapping(t Table) Mapping { return wire.DefaultMapping(t) }

// DefaultAlternateExchange is wire.DefaultAlternateExchange.
func DefaultAlternateExchange(exchange string) string {
	return wire.DefaultAlternateExchange(exchange)
}
