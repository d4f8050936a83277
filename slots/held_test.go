package slots_test

import (
	"errors"
	"testing"

	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/slots"
)

// A slot advanced between the check and START_REPLICATION (any role with REPLICATION may advance
// a free slot) is seen once the session holds it: the server streams from the advanced position,
// and CheckHeld refuses it as a gap. Unmoved, it passes, held by the session's walsender.
func TestCheckHeldSeesASlotAdvancedBeforeItWasHeld(t *testing.T) {
	for _, advance := range []bool{false, true} {
		db, conn, slot := setup(t)
		if _, err := ensure(t, db, conn, slot); err != nil {
			t.Fatal(err)
		}
		checked, err := inspect.ReadSlot(t.Context(), conn, slot)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(t.Context(), `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
			VALUES ('order', '1', 'in.the.window', '{}')`); err != nil {
			t.Fatal(err)
		}
		if advance {
			if _, err := conn.Exec(t.Context(), "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", slot); err != nil {
				t.Fatal(err)
			}
		}
		repl := stream(t, db, slot)
		held, err := slots.CheckHeld(t.Context(), slots.HeldConfig{Slot: slot, PID: repl.PID(), SlotDB: conn,
			Registry: registry.New(conn, "public"), Checked: checked})
		switch {
		case !advance && err != nil:
			t.Fatalf("unmoved slot: %v", err)
		case !advance && (held.ActivePID == nil || uint32(*held.ActivePID) != repl.PID()):
			t.Fatalf("held by %v, want the session's walsender %d", held.ActivePID, repl.PID())
		case advance && (!errors.Is(err, slots.ErrSlotGap) || !slots.Refused(err)):
			t.Fatalf("slot advanced to %s before it was held: %v, want a refused gap", held.ConfirmedFlush, err)
		}
	}
}
