package prune_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/prune"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/wire"
)

func TestParseAge(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{{"36h", 36 * time.Hour}, {"90m", 90 * time.Minute}, {"7d", 7 * 24 * time.Hour}} {
		if got, err := prune.ParseAge(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseAge(%q) = %v, %v, want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "0s", "-1h", "0d", "xd", "7", "d"} {
		if _, err := prune.ParseAge(bad); err == nil {
			t.Errorf("ParseAge(%q): nil error", bad)
		}
	}
}

// Only rows older than the age go, a batch per transaction; a dry run counts them and deletes
// nothing.
func TestRunDeletesOnlyOldRowsInBatches(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db, conn := pg.MigratedDatabase(t, migrations.Config{})
	ctx := t.Context()
	pg.Exec(t, db, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
		SELECT 'order', g::text, 'order.created', '{}', now() - interval '2 days' FROM generate_series(1, 5) g`)
	pg.Exec(t, db, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', g::text, 'order.created', '{}' FROM generate_series(6, 7) g`)
	base := shard.Set{Slot: testenv.UniqueName("prune"), Publication: "walbox"}
	ensureSlot(t, db, conn, base.Slot) // every row so far is below its horizon
	count := func() (n int) {
		t.Helper()
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	job := prune.Job{Table: outbox.DefaultTable, OlderThan: 24 * time.Hour, BatchSize: 2, DryRun: true, Base: base}
	res, err := job.Run(ctx, conn)
	if err != nil || res.Rows != 5 || res.Batches != 0 || count() != 7 {
		t.Fatalf("dry run: %+v, %v, %d rows left; want 5 counted, none deleted", res, err, count())
	}
	if age := time.Since(res.Cutoff); age < 23*time.Hour || age > 25*time.Hour {
		t.Errorf("cutoff %v is %v ago, want a day", res.Cutoff, age)
	}
	job.DryRun = false
	res, err = job.Run(ctx, conn)
	if err != nil || res.Rows != 5 || res.Batches != 3 || count() != 2 {
		t.Fatalf("prune: %+v, %v, %d rows left; want 5 deleted in 3 batches, 2 left", res, err, count())
	}
	if _, err := (prune.Job{Table: outbox.DefaultTable, OlderThan: time.Hour}).Run(ctx, conn); err == nil {
		t.Error("a batch size of 0: nil error")
	}
}

// ensureSlot creates the slot and its record, as walbox migrate does: the record's horizon is
// taken now.
func ensureSlot(t *testing.T, db string, conn *pgx.Conn, slot string) {
	t.Helper()
	created, err := slots.EnsureSlot(t.Context(), db, slot, "walbox", []wire.Table{outbox.DefaultTable}, registry.New(conn, "public"))
	if err != nil || !created {
		t.Fatalf("create slot %s: %v, created %v", slot, err, created)
	}
	t.Cleanup(func() { _ = slots.Drop(context.Background(), conn, slot) })
}

// Rows older than the age but committed after the horizon a relaying slot confirmed stay: walbox
// may not have relayed them, and recover would need them. That holds for every shard's slot, and a
// relaying slot with no record keeps every row. On the old code prune deleted by age alone.
func TestRunKeepsRowsNoSlotConfirmed(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db, conn := pg.MigratedDatabase(t, migrations.Config{})
	ctx := t.Context()
	insertOld := func(n int) {
		t.Helper()
		pg.Exec(t, db, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
			SELECT 'order', g::text, 'order.created', '{}', now() - interval '2 days' FROM generate_series(1, $1) g`, n)
	}
	count := func() (n int) {
		t.Helper()
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	base := shard.Set{Slot: testenv.UniqueName("keep"), Publication: "walbox"}
	job := prune.Job{Table: outbox.DefaultTable, OlderThan: time.Hour, BatchSize: 100, Base: base}
	run := func(dry bool) prune.Result {
		t.Helper()
		j := job
		j.DryRun = dry
		res, err := j.Run(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	insertOld(3)
	t.Run("a relaying slot without a record keeps every row", func(t *testing.T) {
		if res := run(false); res.Rows != 0 || res.Kept != 3 || !strings.Contains(res.Horizon.String(), "has no record") || count() != 3 {
			t.Fatalf("prune: %+v (%s), %d rows left; want nothing deleted, 3 kept, naming the missing record", res, res.Horizon, count())
		}
	})
	ensureSlot(t, db, conn, base.Slot)
	insertOld(4) // after the slot's horizon: not confirmed
	t.Run("only rows below the recorded horizon go", func(t *testing.T) {
		res := run(true)
		if res.Rows != 3 || res.Kept != 4 || res.Horizon.Slot != base.Slot || count() != 7 {
			t.Fatalf("dry run: %+v (%s), %d rows left; want 3 counted, 4 kept back by slot %s, none deleted", res, res.Horizon, count(), base.Slot)
		}
		if res := run(false); res.Rows != 3 || res.Kept != 4 || count() != 4 {
			t.Fatalf("prune: %+v, %d rows left; want 3 deleted, 4 kept", res, count())
		}
	})
	confirmAll(t, conn, base.Slot)
	t.Run("every shard's slot counts", func(t *testing.T) {
		// A set of two shards beside the single slot, as walbox reshard leaves it: shard 0 is
		// recorded, shard 1 not yet.
		sharded := shard.Set{Slot: base.Slot, Publication: base.Publication, N: 2}
		for k := range 2 {
			pg.Exec(t, db, "CREATE PUBLICATION "+sharded.PublicationName(k)+" FOR TABLE outbox WHERE ("+sharded.Filter(k)+") WITH (publish = 'insert')")
		}
		ensureSlot(t, db, conn, sharded.SlotName(0))
		res := run(false)
		if res.Rows != 0 || res.Kept != 4 || !strings.Contains(res.Horizon.String(), sharded.SlotName(1)) || count() != 4 {
			t.Fatalf("prune: %+v (%s), %d rows left; want nothing deleted while %s has no record", res, res.Horizon, count(), sharded.SlotName(1))
		}
		insertOld(2) // after the single slot's last confirm
		ensureSlot(t, db, conn, sharded.SlotName(1))
		res = run(false)
		if res.Rows != 4 || res.Kept != 2 || res.Horizon.Slot != base.Slot || count() != 2 {
			t.Fatalf("prune: %+v (%s), %d rows left; want the 4 rows below every slot's horizon deleted, 2 kept by %s",
				res, res.Horizon, count(), base.Slot)
		}
	})
	t.Run("no slot relays the table: nothing goes", func(t *testing.T) {
		pg.Exec(t, db, "CREATE TABLE other (LIKE outbox INCLUDING ALL)")
		pg.Exec(t, db, "INSERT INTO other SELECT * FROM outbox")
		j := job
		j.Table = outbox.Table{Schema: "public", Name: "other"}
		res, err := j.Run(ctx, conn)
		if err != nil || res.Rows != 0 || res.Kept != 2 || !strings.Contains(res.Horizon.String(), "no publication") {
			t.Fatalf("prune: %+v (%s), %v; want nothing deleted, saying no publication publishes the table", res, res.Horizon, err)
		}
	})
}

// confirmAll records a horizon taken now for the slot, as the relay does once the broker
// confirmed everything committed so far.
func confirmAll(t *testing.T, conn *pgx.Conn, slot string) {
	t.Helper()
	reg := registry.New(conn, "public")
	lsn, xmin, err := reg.Horizon(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Confirm(t.Context(), slot, 1, lsn, xmin); err != nil {
		t.Fatal(err)
	}
}
