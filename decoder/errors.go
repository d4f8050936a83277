package decoder

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/wire"
)

// Sentinels that classify every error Decode returns. Test with errors.Is or IsBadRow.
var (
	// ErrMalformed: the data is truncated, garbled, of an unknown message type, or refers to a
	// relation that was never announced. The stream cannot be trusted past this point.
	ErrMalformed = errors.New("malformed pgoutput data")
	// ErrBadRow: a well-formed outbox row that can never become a valid message. Its event type may
	// be NULL or empty, its payload not JSON, or a required column missing. Its routing key column
	// may be NULL, and so on. Error.Partial holds what could be decoded of it.
	ErrBadRow = errors.New("bad outbox row")
	// ErrForeignTable: an insert into a table that is not one of the configured outbox tables. So
	// the publication contains a table walbox was not told about. Error.Table names it.
	ErrForeignTable = errors.New("insert into a table that is not an outbox table")
	// ErrSchemaDrift: a Relation message announces an outbox table whose columns no longer fit its
	// mapping. A required column was renamed or dropped, or left out by the publication's column
	// list. It is a configuration error: every later row would be bad.
	ErrSchemaDrift = errors.New("outbox table no longer fits its mapping")
	// ErrStreaming: a message of a streamed in-progress transaction. walbox never asks for
	// streaming. So the server and the relay disagree about the protocol.
	ErrStreaming = errors.New("unexpected streamed-transaction message")
)

// Error is the only error type Decode returns. Err wraps one of the sentinels.
type Error struct {
	// LSN is the WAL start of the XLogData message that failed. Where it has none (a Relation
	// message), it is the commit LSN of the transaction being decoded.
	LSN pglogrepl.LSN
	// MsgID is the row's id, if it was decoded; the zero UUID otherwise. It is zero for an id
	// column that is not of type uuid too (see Partial.MessageID).
	MsgID uuid.UUID
	// Table is the relation ("schema.name") of the failing row, if known.
	Table string
	// Column is the column at fault, if any.
	Column string
	// Partial is the row decoded as far as possible, for ErrBadRow. Every field that could be
	// decoded is set, and the others are zero. An unusable payload is kept as its raw bytes.
	Partial wire.Message
	// Err wraps one of ErrMalformed, ErrBadRow, ErrForeignTable, ErrSchemaDrift and ErrStreaming.
	Err error
}

// Error returns e.g. "decode at 0/16B3748 (msg 0b2c…, table public.outbox, column payload):
// bad outbox row: payload is not JSON".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("decode at ")
	b.WriteString(e.LSN.String())
	var ctx []string
	if id := e.Partial.MessageID; id != "" {
		ctx = append(ctx, "msg "+id)
	} else if e.MsgID != uuid.Nil {
		ctx = append(ctx, "msg "+e.MsgID.String())
	}
	if e.Table != "" {
		ctx = append(ctx, "table "+e.Table)
	}
	if e.Column != "" {
		ctx = append(ctx, "column "+e.Column)
	}
	if len(ctx) > 0 {
		b.WriteString(" (" + strings.Join(ctx, ", ") + ")")
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying error, which wraps one of the sentinels.
func (e *Error) Unwrap() error { return e.Err }

// IsBadRow reports whether err is (or wraps) an ErrBadRow: a row to park, not a reason to stop.
func IsBadRow(err error) bool { return errors.Is(err, ErrBadRow) }

// malformed returns an ErrMalformed error with the given detail.
func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// badRow returns an ErrBadRow error with the given detail.
func badRow(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadRow}, args...)...)
}
