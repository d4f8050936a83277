package slots

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

var (
	// ErrSlotMissing means the slot does not exist though walbox recorded it.
	ErrSlotMissing = errors.New("replication slot does not exist")
	// ErrSlotActive means another process streams from the slot.
	ErrSlotActive = errors.New("replication slot is active in another process")
	// ErrNoRegistry means the registry of slots (walbox_slots) is missing and cannot be created.
	ErrNoRegistry = errors.New("slot registry is missing")
	// ErrNothingRecorded means the slot has no record: there is no known position to recover from.
	ErrNothingRecorded = errors.New("nothing is recorded for the slot")
	// errNoLowerBound means the record holds no transaction horizon that row ids can be held
	// against, so only republishing every row (AllRows) covers the gap.
	errNoLowerBound = errors.New("no lower bound for the rows of the gap")
	// errRowsGone means the gap's rows are not in the table: producers delete rows as they
	// insert them, or they were pruned.
	errRowsGone = errors.New("the rows of the gap are not in the outbox table")
	// errPositionIDs means a table's message ids come from stream positions, which rows read
	// from the table do not have.
	errPositionIDs = errors.New("message ids come from stream positions")
)

// classify maps the server's errors about a slot to the errors of this package.
func classify(err error, slot string) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "55006": // object_in_use: the slot is active for another PID
		return fmt.Errorf("%w: slot %s: %s", ErrSlotActive, slot, pgErr.Message)
	case "42704": // undefined_object
		return fmt.Errorf("%w: slot %s: %s", ErrSlotMissing, slot, pgErr.Message)
	}
	return err
}
