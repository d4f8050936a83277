package slots

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// Execer is the part of a pgx connection, pool or transaction that Drop uses.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Drop drops the slot. A slot another process streams from is ErrSlotActive. A missing one is
// ErrSlotMissing. It leaves the slot's record alone. The command walbox recover resets the record.
// The command walbox reshard --retire forgets it (registry.Store.Forget) once the slot is gone.
func Drop(ctx context.Context, db Execer, slot string) error {
	if _, err := db.Exec(ctx, "SELECT pg_catalog.pg_drop_replication_slot($1)", slot); err != nil {
		return fmt.Errorf("drop slot %s: %w", slot, classify(err, slot))
	}
	return nil
}
