package replication

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/inspect"
)

// notReady classifies SQLSTATE 55000 (object_not_in_prerequisite_state) by its condition.
// The server uses it for an invalidated slot.
// It also uses it for a slot of another database, a physical slot, wal_level below logical, a server in recovery.
// Only an invalidated slot is lost.
// A condition not recognised here is left retryable: it may pass (a standby being promoted), and
// retrying skips nothing.
func notReady(pgErr *pgconn.PgError, slot string) error {
	text := pgErr.Message + " " + pgErr.Detail
	switch {
	case strings.Contains(text, "can no longer get changes"), strings.Contains(text, "has been invalidated"):
		return fatal(fmt.Errorf("%w: slot %s: %s", ErrSlotLost, slot, describe(pgErr)))
	case strings.Contains(text, "wal_level"):
		return fatal(fmt.Errorf("%w: %s", inspect.ErrWalLevel, describe(pgErr)))
	case strings.Contains(text, "was not created in this database"), strings.Contains(text, "physical replication slot"):
		return fatal(fmt.Errorf("%w: slot %s: %s", inspect.ErrSlotMismatch, slot, describe(pgErr)))
	}
	return fmt.Errorf("slot %s: %w", slot, pgErr)
}

// describe returns the server's message with its detail, which often names the cause.
func describe(pgErr *pgconn.PgError) string {
	if pgErr.Detail == "" {
		return pgErr.Message
	}
	return pgErr.Message + " (" + pgErr.Detail + ")"
}
