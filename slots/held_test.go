package slots_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/slots"
)

// A slot advanced between the check and START_REPLICATION (any role with REPLICATION may advance
// a free slot) is seen once the session holds it: the server streams from the advanced position,
// and CheckHeld refuses it as a gap if that is past the record. Unmoved, it passes, held by the
// session's walsender; moved no further than the record (walbox confirmed up to there, and the
// slot's own position lagged, as after a server crash), it passes at the moved position.
func TestCheckHeldSeesASlotAdvancedBeforeItWasHeld(t *testing.T) {
	for _, c := range []struct {
		name            string
		advance, record bool
	}{{"unmoved", false, false}, {"advanced past the record", true, false}, {"advanced within the record", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			db, conn, slot := setup(t)
			if _, err := ensure(t, db, conn, slot); err != nil {
				t.Fatal(err)
			}
			reg := registry.New(conn, "public")
			checked, err := inspect.ReadSlot(t.Context(), conn, slot)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(t.Context(), `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
				VALUES ('order', '1', 'in.the.window', '{}')`); err != nil {
				t.Fatal(err)
			}
			var now string
			if err := conn.QueryRow(t.Context(), "SELECT pg_current_wal_lsn()::text").Scan(&now); err != nil {
				t.Fatal(err)
			}
			to, err := pglogrepl.ParseLSN(now)
			if err != nil {
				t.Fatal(err)
			}
			if c.record {
				if _, err := reg.Confirm(t.Context(), slot, 1, to, 0); err != nil {
					t.Fatal(err)
				}
			}
			if c.advance {
				if _, err := conn.Exec(t.Context(), "SELECT pg_replication_slot_advance($1, $2::text::pg_lsn)", slot, to.String()); err != nil {
					t.Fatal(err)
				}
			}
			repl := stream(t, db, slot)
			held, err := slots.CheckHeld(t.Context(), slots.HeldConfig{Slot: slot, PID: repl.PID(), SlotDB: conn,
				Registry: reg, Checked: checked})
			gap := c.advance && !c.record
			switch {
			case gap && (!errors.Is(err, slots.ErrSlotGap) || !slots.Refused(err)):
				t.Fatalf("slot advanced to %s past its record: %v, want a refused gap", held.ConfirmedFlush, err)
			case gap:
			case err != nil:
				t.Fatal(err)
			case held.ActivePID == nil || uint32(*held.ActivePID) != repl.PID():
				t.Fatalf("held by %v, want the session's walsender %d", held.ActivePID, repl.PID())
			case c.advance && held.ConfirmedFlush != to, !c.advance && held.ConfirmedFlush != checked.ConfirmedFlush:
				t.Fatalf("held at %s; checked at %s, advanced to %s (%t)", held.ConfirmedFlush, checked.ConfirmedFlush, to, c.advance)
			}
		})
	}
}

// A walsender that ends between START_REPLICATION and the read that follows (terminated, or its
// connection cut) leaves the slot to no process, or to the next one that starts on it: nothing
// was streamed, and the next session checks the slot again. CheckHeld says the walsender ended,
// which is no refusal: the relay starts again instead of stopping as if the slot had a gap.
func TestCheckHeldAfterTheWalsenderEnded(t *testing.T) {
	for _, taken := range []bool{false, true} {
		t.Run(fmt.Sprintf("taken over %t", taken), func(t *testing.T) {
			db, conn, slot := setup(t)
			if _, err := ensure(t, db, conn, slot); err != nil {
				t.Fatal(err)
			}
			reg := registry.New(conn, "public")
			checked, err := inspect.ReadSlot(t.Context(), conn, slot)
			if err != nil {
				t.Fatal(err)
			}
			repl := stream(t, db, slot)
			if _, err := conn.Exec(t.Context(), "SELECT pg_terminate_backend($1)", int64(repl.PID())); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(time.Minute)
			for {
				var gone bool
				if err := conn.QueryRow(t.Context(), `SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)
					AND NOT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $2 AND active)`, int64(repl.PID()), slot).Scan(&gone); err != nil {
					t.Fatal(err)
				}
				if gone {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the terminated walsender still runs")
				}
				time.Sleep(50 * time.Millisecond)
			}
			if taken {
				stream(t, db, slot) // another process holds the slot now
			}
			_, err = slots.CheckHeld(t.Context(), slots.HeldConfig{Slot: slot, PID: repl.PID(), SlotDB: conn,
				Registry: reg, Checked: checked})
			if !errors.Is(err, slots.ErrWalsenderGone) || slots.Refused(err) || errors.Is(err, slots.ErrSlotGap) {
				t.Fatalf("walsender %d terminated: %v; want ErrWalsenderGone, no refusal", repl.PID(), err)
			}
			t.Log(err)
		})
	}
}
