package registry_test

import (
	"os"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/wire"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// The statistics count every delete from the table; walbox explains those prune made and those
// recover accepted, and the rest are unexplained.
func TestDeletesExplainsPrunedAndAccepted(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db, conn := pg.MigratedDatabase(t, migrations.Config{})
	ctx := t.Context()
	table := wire.DefaultTable
	read := func() registry.Deletes {
		t.Helper()
		d, err := registry.ReadDeletes(ctx, conn, "public", table, "walbox")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	waitSeen := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for read().Seen < n {
			if time.Now().After(deadline) {
				t.Fatalf("the statistics never counted %d deletes: %+v", n, read())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	pg.Exec(t, db, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', g::text, 'order.created', '{}' FROM generate_series(1, 10) g`)

	// A prune's batch: the delete and its count in one transaction.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "DELETE FROM outbox WHERE aggregate_id::int <= 4"); err != nil {
		t.Fatal(err)
	}
	if err := registry.CountPruned(ctx, tx, "public", table, 4); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	pg.Exec(t, db, "DELETE FROM outbox WHERE aggregate_id::int <= 7") // 3 by hand
	waitSeen(7)
	if d := read(); d.Seen != 7 || d.Explained != 4 || d.Unexplained() != 3 {
		t.Fatalf("after 4 pruned and 3 deleted by hand: %+v, unexplained %d; want 7 seen, 4 explained, 3 unexplained", d, d.Unexplained())
	}
	if err := registry.AcceptDeletes(ctx, conn, "public", table, "walbox"); err != nil {
		t.Fatal(err)
	}
	if d := read(); d.Unexplained() != 0 {
		t.Fatalf("after the loss was accepted: %+v, unexplained %d; want 0", d, d.Unexplained())
	}
	// The loss was accepted for one slot: another slot relaying the table still counts the
	// deletes, which may have taken rows of its own gap.
	if d, err := registry.ReadDeletes(ctx, conn, "public", table, "walbox_1_of_2"); err != nil || d.Unexplained() != 3 {
		t.Fatalf("another slot after the loss was accepted for walbox: %+v, unexplained %d (%v); want 3", d, d.Unexplained(), err)
	}
	// Statistics reset: the count begins again, and so does what was explained.
	pg.Exec(t, db, "SELECT pg_stat_reset()")
	pg.Exec(t, db, "DELETE FROM outbox WHERE aggregate_id::int <= 8")
	waitSeen(1)
	if d := read(); d.Seen != 1 || d.Unexplained() != 1 {
		t.Fatalf("after a reset and 1 delete by hand: %+v, unexplained %d; want 1 seen, 1 unexplained", d, d.Unexplained())
	}
}
