package replication

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/decoder"
)

// Anchored is implemented by a Publisher that skips what the broker stored already (package streampub).
// It skips up to an anchor it reads at Bind.
// The relay checks the anchor against the server before it starts the slot (checkAnchor).
// It asks Moved once the slot is held.
// A relay that held the slot between Bind and START_REPLICATION may have stored rows the anchor misses.
type Anchored interface {
	// Last returns the anchor's position: the timeline and commit LSN of the last message stored.
	// Found is false when there is none.
	Last() (timeline int32, commitLSN uint64, found bool)
	// Moved reports whether the broker stored messages of this publisher since Bind.
	Moved(ctx context.Context) (bool, error)
}

// ErrAnchorGap means the broker stores rows of this relay from WAL the server does not have.
// The server is a restored data directory, or an old primary brought back.
// New rows would take positions at or before the stored ones, and be confirmed without being sent.
var ErrAnchorGap = errors.New("the stream holds rows this server's WAL does not have")

// errAnchorMoved means the broker stored messages of this relay's producer after the session read its anchor.
// The session starts over, with the new anchor.
var errAnchorMoved = errors.New("the broker stored messages of this relay's producer after the session read its last one (another relay held the slot meanwhile); starting over")

// errAnchorAhead means the standby has not yet replayed the WAL of the last stored row.
// The session starts again once it has.
var errAnchorAhead = errors.New("the stream holds rows past the WAL this standby has replayed; waiting for it")

// checkAnchor reads the server's WAL position again, after the anchor was read.
// It checks the anchor of pub against it and against o, the server's timeline history.
// On a standby, WAL past the replay position may still come: an anchor there is waited for, not a gap.
func checkAnchor(ctx context.Context, conn *pgconn.PgConn, pub Publisher, o decoder.Origin, standby bool) error {
	a, ok := pub.(Anchored)
	if !ok {
		return nil
	}
	tl, lsn, found := a.Last()
	if !found {
		return nil
	}
	return checkLast(ctx, conn, tl, lsn, o, standby)
}

// StreamGap checks the stream's last row, committed at lsn on timeline tl, against the server of
// conn, a replication connection. It is walbox run's check at start (checkAnchor), for doctor and
// `walbox recover --dry-run`. It returns an ErrAnchorGap when the row is beyond the server's WAL or
// timeline history. The flag standby says that conn reaches a standby (--replication-url).
func StreamGap(ctx context.Context, conn *pgconn.PgConn, tl int32, lsn uint64, standby bool) error {
	o, err := serverOrigin(ctx, conn)
	if err != nil {
		return err
	}
	return checkLast(ctx, conn, tl, lsn, o, standby)
}

// serverOrigin identifies the server of conn, a replication connection, and reads its timeline history.
func serverOrigin(ctx context.Context, conn *pgconn.PgConn) (decoder.Origin, error) {
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return decoder.Origin{}, fmt.Errorf("identify system: %w", err)
	}
	return readOrigin(ctx, conn, sys)
}

// checkLast checks the last stored row, at timeline tl and commit LSN lsn, as checkAnchor does.
func checkLast(ctx context.Context, conn *pgconn.PgConn, tl int32, lsn uint64, o decoder.Origin, standby bool) error {
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return fmt.Errorf("identify system: %w", err)
	}
	if sys.Timeline != o.Timeline {
		return fmt.Errorf("identify system: the server moved from timeline %d to %d during the session's setup", o.Timeline, sys.Timeline)
	}
	if standby && tl == o.Timeline && pglogrepl.LSN(lsn) >= sys.XLogPos {
		return fmt.Errorf("%w: last stored row committed at %s, replayed up to %s", errAnchorAhead, pglogrepl.LSN(lsn), sys.XLogPos)
	}
	return anchorGap(tl, pglogrepl.LSN(lsn), o, sys.XLogPos)
}

// anchorGap returns an ErrAnchorGap if the anchor at timeline tl, commit LSN lsn, is not in the server's WAL.
// The server's history is o, and its WAL ends at end on its current timeline.
// The anchor is missing on a timeline the history does not have.
// It is also missing at or past where the server's WAL on its timeline ends.
func anchorGap(tl int32, lsn pglogrepl.LSN, o decoder.Origin, end pglogrepl.LSN) error {
	if tl == o.Timeline {
		if lsn < end {
			return nil
		}
		return fmt.Errorf("%w: the last stored row was committed at %s on timeline %d, and this server's WAL ends at %s: "+
			"its data directory was restored from a copy older than the stream, or it is an old primary brought back. "+
			"%s", ErrAnchorGap, lsn, tl, end, gapWayOut)
	}
	for _, h := range o.History {
		if h.Timeline != tl {
			continue
		}
		if lsn < h.End {
			return nil
		}
		return fmt.Errorf("%w: the last stored row was committed at %s on timeline %d, and this server left timeline %d at %s "+
			"(its history): those rows were lost in a failover or a restore. %s", ErrAnchorGap, lsn, tl, tl, h.End, gapWayOut)
	}
	return fmt.Errorf("%w: the last stored row was committed on timeline %d, which is not in the history of this server "+
		"(timeline %d): it is an old primary brought back, or a restored copy. %s", ErrAnchorGap, tl, o.Timeline, gapWayOut)
}

// gapWayOut is the way out of an ErrAnchorGap.
const gapWayOut = "walbox stops rather than take new rows for stored ones. Point it at the server that wrote those rows " +
	"(the current primary). If they are gone for good, publish into a new stream (--stream) or from a new slot"

// anchorError makes a gap the end of the relay; other errors end the session.
func anchorError(err error) error {
	if errors.Is(err, ErrAnchorGap) {
		return fatal(err)
	}
	return err
}

// anchorMoved asks an Anchored publisher, once the slot is held, whether the broker stored its messages.
// Messages stored since its anchor was read end the session (errAnchorMoved).
func anchorMoved(ctx context.Context, pub Publisher) error {
	a, ok := pub.(Anchored)
	if !ok {
		return nil
	}
	moved, err := a.Moved(ctx)
	if err != nil {
		return brokerError{err}
	}
	if moved {
		return errAnchorMoved
	}
	return nil
}
