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
	ColDeliverAt     = wire.ColDeliverAt

	EmitFunction         = wire.EmitFunction
	DefaultMessagePrefix = wire.DefaultMessagePrefix

	IDFromPosition = wire.IDFromPosition
)

// DefaultTable is wire.DefaultTable.
var DefaultTable = wire.DefaultTable

// ParseTable is wire.ParseTable.
func ParseTable(s string) (Table, error) { return wire.ParseTable(s) }
