package slots

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/registry"
)

var (
	// ErrSlotMissing means the slot does not exist though walbox recorded it.
	ErrSlotMissing = errors.New("replication slot does not exist")
	// ErrSlotGap means the slot is not the one walbox recorded, so rows may have been skipped. It
	// was dropped, recreated or advanced behind walbox's back, or it lives on another server.
	ErrSlotGap = errors.New("replication slot does not continue from walbox's recorded position")
	// ErrSlotActive means another process streams from the slot.
	ErrSlotActive = errors.New("replication slot is active in another process")
	// ErrNoRegistry means the registry of slots (walbox_slots) is missing and cannot be created.
	ErrNoRegistry = errors.New("slot registry is missing")
	// ErrNothingRecorded means the slot has no record: there is no known position to recover from.
	ErrNothingRecorded = errors.New("nothing is recorded for the slot")
	// errNoLowerBound means the record holds no transaction horizon to compare row ids with. So
	// only republishing every row (AllRows) covers the gap.
	errNoLowerBound = errors.New("no lower bound for the rows of the gap")
	// errRowsGone means the gap's rows are not in the table. Producers delete rows as they insert
	// them, or the rows were pruned.
	errRowsGone = errors.New("the rows of the gap are not in the outbox table")
	// errPositionIDs means a table's message ids come from stream positions, which rows read
	// from the table do not have.
	errPositionIDs = errors.New("message ids come from stream positions")
	// errStreamAhead means the stream holds this relay's messages at or past the new slot's start.
	// Rows published there would be taken for stored.
	errStreamAhead = errors.New("the stream is ahead of this server")
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

// refused marks an error that retrying cannot fix. The slot does not fit, does not continue from
// its record, or may not be created.
type refused struct{ error }

func (r refused) Unwrap() error { return r.error }

// Refused reports whether err is one that retrying cannot fix (see Prepare), a recorded stop
// included.
func Refused(err error) bool {
	var r refused
	var s *StopRecorded
	return errors.As(err, &r) || errors.As(err, &s)
}

// StopRecorded is Prepare's error for a slot whose record holds a stop. The command walbox run
// stopped on the slot where only walbox recover gets past. The slot is not streamed from again
// before that.
type StopRecorded struct {
	Slot string
	Stop registry.Stop
}

func (e *StopRecorded) Error() string {
	return fmt.Sprintf("slot %s: walbox stopped on it at %s: %s", e.Slot, e.Stop.LSN, e.Stop.Reason)
}
