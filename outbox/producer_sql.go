package outbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"
)

// WriteSQL writes msgs into DefaultTable within a database/sql transaction; see Writer.WriteSQL.
func WriteSQL(ctx context.Context, tx *sql.Tx, msgs ...Message) error {
	return defaultWriter.WriteSQL(ctx, tx, msgs...)
}

// EmitSQL is Emit for a database/sql transaction.
func EmitSQL(ctx context.Context, tx *sql.Tx, msgs ...Message) error {
	return defaultEmitter.WriteSQL(ctx, tx, msgs...)
}

// WriteSQL is Write for database/sql, with the same validation, statement and guarantees. It works
// with any Postgres driver that takes $n placeholders and string arguments. The drivers pgx's
// stdlib and lib/pq are two. The columns travel as arrays in Postgres's text form. With
// DeleteAfterInsert it takes a second round trip.
func (w *Writer) WriteSQL(ctx context.Context, tx *sql.Tx, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if tx == nil {
		return errNilTx
	}
	rows, err := w.prepare(ctx, msgs)
	if err != nil {
		return err
	}
	insert, args := w.insert(rows)
	if err := encodeText(args); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, insert, args...); err != nil {
		return fmt.Errorf("%s %s: %w", w.verb(), w.table, err)
	}
	if w.deleteAfterInsert {
		if _, err := tx.ExecContext(ctx, w.deleteSQL, args[0]); err != nil {
			return fmt.Errorf("delete from %s: %w", w.table, err)
		}
	}
	return nil
}

// argOIDs are the array types of the insert's arguments, in order.
var argOIDs = []uint32{pgtype.UUIDArrayOID, pgtype.TextArrayOID, pgtype.TextArrayOID, pgtype.TextArrayOID,
	pgtype.JSONBArrayOID, pgtype.JSONBArrayOID, pgtype.TimestamptzArrayOID, pgtype.TimestamptzArrayOID}

// encodeText replaces each argument with its Postgres text form, in place.
func encodeText(args []any) error {
	m := pgtype.NewMap() // a Map caches plans and is not safe for concurrent use
	for i, a := range args {
		b, err := m.Encode(argOIDs[i], pgtype.TextFormatCode, a, nil)
		if err != nil {
			return fmt.Errorf("encode outbox column %d: %w", i+1, err)
		}
		args[i] = string(b)
	}
	return nil
}
