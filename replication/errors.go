package replication

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/wire"
)

var (
	// ErrNoPublication means the configured publication does not exist.
	ErrNoPublication = inspect.ErrNoPublication
	// ErrSlotLost means the slot was invalidated (wal_status = lost).
	// Changes after its position are gone.
	// Walbox never recreates such a slot by itself.
	ErrSlotLost = inspect.ErrSlotLost
	// ErrSlotMissing means the slot disappeared while walbox was using it.
	ErrSlotMissing = slots.ErrSlotMissing
	// ErrSlotGap means the slot is not the one walbox recorded, so rows may have been skipped.
	// It was dropped, recreated or advanced behind walbox's back, or it lives on another server.
	ErrSlotGap = slots.ErrSlotGap
	// ErrNotCovered means the publication no longer publishes the inserts of an outbox table.
	ErrNotCovered = inspect.ErrNotCovered
	// errRecordDenied means the relay's role may not execute the functions that record positions.
	errRecordDenied = errors.New("this role may not write walbox's record of its slots")
	// ErrSlotActive means another process streams from the slot; this relay waits as a standby.
	ErrSlotActive = slots.ErrSlotActive
	// errServerSilent means the server sent nothing for ServerTimeout though asked to reply.
	// The connection is taken for dead and a new session starts.
	errServerSilent = errors.New("no message from the server")
)

// permanent marks an error that retrying cannot fix.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

func fatal(err error) error { return permanent{err} }

// retryable reports whether a new session may get past err. Errors about the server's setup, the
// slot's loss and rows that can never be published are not retryable.
func retryable(err error) bool {
	var p permanent
	return err != nil && !errors.As(err, &p)
}

// classify maps server errors met while starting or streaming to walbox's errors.
func classify(err error, slot string) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "55006": // object_in_use: the slot is active for another PID
		return fmt.Errorf("%w: slot %s: %s", ErrSlotActive, slot, pgErr.Message)
	case "55000": // object_not_in_prerequisite_state: many conditions, see notReady
		return notReady(pgErr, slot)
	case "42704": // undefined_object: slot or publication
		if strings.Contains(pgErr.Message, "publication") {
			return fatal(fmt.Errorf("%w: %s", ErrNoPublication, pgErr.Message))
		}
		return fatal(fmt.Errorf("%w: slot %s: %s", ErrSlotMissing, slot, pgErr.Message))
	}
	return err
}

// brokerError marks an error of the broker side: dialing, publishing, or a message the broker did
// not confirm.
type brokerError struct{ err error }

func (b brokerError) Error() string { return b.err.Error() }
func (b brokerError) Unwrap() error { return b.err }

// bindError is the error of a publisher's Bind: a broker error.
// It ends the relay if the broker stores what the relay cannot continue from.
func bindError(err error) error {
	err = brokerError{fmt.Errorf("bind publisher: %w", err)}
	if errors.Is(err, wire.ErrConflict) {
		return fatal(err)
	}
	return err
}

// IsBrokerError reports whether err came from the broker side rather than from PostgreSQL.
func IsBrokerError(err error) bool {
	var b brokerError
	return errors.As(err, &b)
}
