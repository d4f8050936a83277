package outbox

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/wire"
)

// CancelFunction is the function `walbox migrate` creates in the outbox table's schema. It cancels
// a scheduled message (Message.DeliverAt).
const CancelFunction = "walbox_cancel"

// Cancel cancels the scheduled message id within tx, through the cancel function in DefaultTable's
// schema; see Writer.Cancel.
func Cancel(ctx context.Context, tx pgx.Tx, id uuid.UUID) (bool, error) {
	return defaultWriter.Cancel(ctx, tx, id)
}

// Cancel cancels the scheduled message id within tx. It reports true when the message was still
// waiting: it will never be sent once tx commits. That holds for a message the relay has not read
// yet too. It reports false when the message was sent already: it cannot be called back. A cancel
// whose transaction commits before the message's DeliverAt, by the database's clock, always wins.
// The rest of the guarantee is in docs/outbox.md#scheduled-delivery.
func (w *Writer) Cancel(ctx context.Context, tx pgx.Tx, id uuid.UUID) (bool, error) {
	if tx == nil {
		return false, errNilTx
	}
	fn := wire.Table{Schema: w.table.Schema, Name: CancelFunction}.Quoted()
	var waiting bool
	if err := tx.QueryRow(ctx, "SELECT "+fn+"($1::pg_catalog.text)", id.String()).Scan(&waiting); err != nil {
		return false, fmt.Errorf("cancel %s: %w", id, err)
	}
	return waiting, nil
}
