package relayd_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/outbox"
)

// A relay upgraded before walbox migrate applied migration 018 (walbox_schedule_done.sent_by). It
// records a row due later and relays the rows after it: its slot moves past both. It warns, and
// sends the scheduled message only once the column exists. Its record failed before, ending each
// session at the row: nothing after it was confirmed, and WAL grew.
func TestARelayAheadOfItsMigrationRecordsAndRelaysOn(t *testing.T) {
	cfg, pg, db := config(t)
	pg.Exec(t, db, "ALTER TABLE public.walbox_schedule_done DROP COLUMN sent_by")
	logs, got := startCounting(t, cfg, "none sent until walbox migrate runs")
	conn := pg.Conn(t, db)
	ctx := context.Background()

	scheduled, _ := uuid.NewV7()
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		return outbox.Write(ctx, tx, outbox.Message{ID: scheduled, AggregateType: "order", AggregateID: "1",
			EventType: "order.reminder", Payload: []byte(`{}`), DeliverAt: dbNow(t, conn).Add(time.Second)})
	})
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := uuid.NewV7()
	var plainLSN string
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		err := outbox.Write(ctx, tx, outbox.Message{ID: plain, AggregateType: "order", AggregateID: "1", EventType: "order.placed", Payload: []byte(`{}`)})
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT pg_catalog.pg_current_wal_insert_lsn()::text").Scan(&plainLSN)
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the plain row relayed", func() bool { _, n := got.get(plain.String()); return n == 1 })
	eventually(t, "the slot past the scheduled row and the plain one", func() bool {
		var past bool
		err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn > $1::pg_lsn FROM pg_catalog.pg_replication_slots WHERE slot_name = $2",
			plainLSN, cfg.Relay.Slot).Scan(&past)
		return err == nil && past
	})
	var recorded int
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM walbox_schedule WHERE message_id = $1", scheduled.String()).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if recorded != 1 {
		t.Fatalf("the scheduled row is recorded %d times, want once", recorded)
	}
	if n := logs.count(); n == 0 {
		t.Error("no warning that the schedule needs walbox migrate")
	}
	if _, n := got.get(scheduled.String()); n != 0 {
		t.Errorf("the scheduled message was sent %d times before migration 018, want none", n)
	}

	pg.Exec(t, db, "ALTER TABLE public.walbox_schedule_done ADD COLUMN sent_by text[]")
	eventually(t, "the scheduled message once migrated", func() bool { _, n := got.get(scheduled.String()); return n == 1 })
}
