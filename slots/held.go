package slots

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/registry"
)

// HeldConfig is what CheckHeld needs: the slot, the session's walsender and where to read both
// the slot and its record.
type HeldConfig struct {
	Slot string
	// PID is the backend process id of the session's replication connection: its walsender.
	PID uint32
	// SlotDB reads the slot: an ordinary connection to the replication server.
	SlotDB   inspect.Querier
	Registry *registry.Store
	// Checked is the slot as Prepare read it.
	Checked inspect.Slot
}

// CheckHeld reads the slot again once the session holds it (START_REPLICATION succeeded). It
// returns the slot. Prepare checks the slot while it is free. Any role with REPLICATION may advance
// a free slot (pg_replication_slot_advance). The server then starts at the advanced position,
// whatever position START_REPLICATION asked for. Once the session's walsender holds the slot nobody
// else can move it. So this read is the one the session streams from.
//
// Some slots it reports or refuses:
//   - A slot the session's walsender does not hold, while the server runs no process of its id.
//     That is ErrWalsenderGone: the walsender ended in between, which a retry gets past.
//   - A slot that this session's walsender, still running, does not hold (another server's?).
//   - A slot that moved past the position walbox recorded. Rows committed in between may have been
//     skipped.
//
// The record holds what the broker confirmed, so a slot moved no further than it is no gap. The
// slot stays where it was moved, so Prepare refuses it at the next start as well.
func CheckHeld(ctx context.Context, c HeldConfig) (inspect.Slot, error) {
	info, err := inspect.ReadSlot(ctx, c.SlotDB, c.Slot)
	if err != nil {
		return info, err
	}
	if !heldBy(info, c.PID) {
		// The walsender that START_REPLICATION reached is gone if the server runs no process of its
		// id. It was terminated, or its connection was lost. The session ended. The next session
		// checks the slot again before it streams. Or it waits while another process holds it.
		var alive bool
		if err := c.SlotDB.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity WHERE pid = $1)",
			int64(c.PID)).Scan(&alive); err != nil {
			return info, fmt.Errorf("look up the session's walsender: %w", err)
		}
		if !alive {
			return info, fmt.Errorf("slot %s: %w (pid %d) before walbox read the slot again, which %s holds now; starting again",
				c.Slot, ErrWalsenderGone, c.PID, holder(info))
		}
	}
	rec, recorded, err := c.Registry.Get(ctx, c.Slot)
	if err != nil {
		return info, err
	}
	return info, judgeHeld(c, info, rec, recorded)
}

// ErrWalsenderGone means the session's walsender ended between START_REPLICATION and the read of
// the slot that follows it. The session is over, and nothing was streamed. Starting again is safe.
var ErrWalsenderGone = errors.New("the session's walsender ended")

// heldBy reports whether the slot, as read, is held by the process pid.
func heldBy(info inspect.Slot, pid uint32) bool {
	return info.Exists && info.ActivePID != nil && uint32(*info.ActivePID) == pid
}

// holder names the process that holds the slot as read, for messages.
func holder(info inspect.Slot) string {
	switch {
	case !info.Exists:
		return "nobody: the slot does not exist there"
	case info.ActivePID != nil:
		return fmt.Sprintf("pid %d", *info.ActivePID)
	}
	return "no process"
}

// judgeHeld compares the slot as read once held with the session's walsender and the record.
func judgeHeld(c HeldConfig, info inspect.Slot, rec registry.Record, recorded bool) error {
	if !heldBy(info, c.PID) {
		return refused{fmt.Errorf("%w: slot %s is held by %s, not by this session's walsender (pid %d), on the server "+
			"walbox reads slots from: that server is not the one the replication connection reached (two servers of one "+
			"system behind one URL?), so the position streamed from cannot be vouched for. "+
			"Point --database-url (and --replication-url) at one server each, then start walbox again",
			ErrSlotGap, c.Slot, holder(info), c.PID)}
	}
	if !recorded {
		return refused{fmt.Errorf("%w: the record of slot %s was deleted while walbox started on it. Run `walbox recover`",
			ErrSlotGap, c.Slot)}
	}
	if rec.Stop.Stopped() {
		return &StopRecorded{Slot: c.Slot, Stop: rec.Stop}
	}
	if info.ConfirmedFlush > rec.ConfirmedLSN {
		return refused{fmt.Errorf("%w: slot %s is at %s, ahead of %s, the last position walbox recorded (at %s): it was advanced "+
			"behind walbox's back after walbox checked it at %s and before walbox held it, and rows committed in between may have "+
			"been skipped. Run `walbox recover`",
			ErrSlotGap, c.Slot, info.ConfirmedFlush, rec.ConfirmedLSN, rec.ConfirmedAt.UTC().Format(time.RFC3339), c.Checked.ConfirmedFlush)}
	}
	return nil
}
