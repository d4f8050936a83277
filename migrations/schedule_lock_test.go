package migrations_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
)

// Migration 017 meets a relay sending due messages: its transaction holds a due row FOR UPDATE,
// awaits the broker, then deletes the row. The migration created its index (a SHARE lock), then
// waited to drop the old one (ACCESS EXCLUSIVE). The sender's delete then waited for the migration:
// a deadlock. Either the migration failed, or the sender's confirmed batch rolled back and went twice.
func TestScheduleIndexMigrationBesideASendingRelay(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db, conn := pg.MigratedDatabase(t, migrations.Config{})
	// The schedule as migration 016 left it.
	pg.Exec(t, db, `DROP INDEX public.walbox_schedule_due_order;
		CREATE INDEX walbox_schedule_deliver_at ON public.walbox_schedule (deliver_at);
		DELETE FROM public.walbox_migrations WHERE target = 'registry:public' AND version = 17`)
	pg.Exec(t, db, dueRow("public"))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// The broker confirmed: the sender deletes its row and commits.
	migrateBesideADelete(ctx, t, pg, db, conn, "public", 17)
	rows, err := conn.Query(ctx, "SELECT indexname::pg_catalog.text FROM pg_catalog.pg_indexes WHERE tablename = 'walbox_schedule' ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("indexes: %v", indexes)
	for _, n := range indexes {
		if n == "walbox_schedule_deliver_at" {
			t.Errorf("walbox_schedule_deliver_at is still there: %v", indexes)
		}
	}
}

// Migration 018 meets a relay, of the version before, sending due messages. Its transaction read
// the tombstones (ACCESS SHARE on walbox_schedule_done), awaits the broker, then notes the sent
// messages there. The migration waits for it, and neither fails.
func TestScheduleDoneMigrationBesideASendingRelay(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db, conn := pg.MigratedDatabase(t, migrations.Config{})
	// The done table as migration 017 left it.
	pg.Exec(t, db, `ALTER TABLE public.walbox_schedule_done DROP COLUMN sent_by;
		DELETE FROM public.walbox_migrations WHERE target = 'registry:public' AND version = 18`)
	pg.Exec(t, db, dueRow("public"))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// The broker confirmed: the sender deletes its row, notes it as that version did, and commits.
	migrateBesideASender(ctx, t, pg, db, conn, "public.walbox_schedule_done", 18,
		lockAndReadTombstone,
		`DELETE FROM public.walbox_schedule WHERE slot_name = 's' AND message_id = 'm1';
		INSERT INTO public.walbox_schedule_done (slot_name, message_id, state) VALUES ('s', 'm1', 'sent'), ('', 'm1', 'sent')`)
	var indexes []string
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.array_agg(indexname::pg_catalog.text ORDER BY 1) FROM pg_catalog.pg_indexes"+
		" WHERE tablename = 'walbox_schedule_done'").Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	slices.Sort(indexes)
	want := []string{"walbox_schedule_done_at", "walbox_schedule_done_pkey"}
	if !slices.Equal(indexes, want) {
		t.Errorf("indexes of walbox_schedule_done %v, want %v", indexes, want)
	}
}

// Migration 019 meets a relay, of the version before, sending due messages: it read the tombstones,
// awaits the broker, then notes the sent messages. The migration waits for it, and neither fails.
func TestTombstoneStampMigrationBesideASendingRelay(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db, conn := pg.MigratedDatabase(t, migrations.Config{})
	// The done table as migration 018 left it.
	pg.Exec(t, db, `ALTER TABLE public.walbox_schedule_done DROP COLUMN lsn, DROP COLUMN next_xid;
		DELETE FROM public.walbox_migrations WHERE target = 'registry:public' AND version = 19`)
	pg.Exec(t, db, dueRow("public"))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	migrateBesideASender(ctx, t, pg, db, conn, "public.walbox_schedule_done", 19,
		lockAndReadTombstone,
		`DELETE FROM public.walbox_schedule WHERE slot_name = 's' AND message_id = 'm1';
		INSERT INTO public.walbox_schedule_done (slot_name, message_id, state, sent_by) VALUES ('', 'm1', 'sent', '{s}')`)
	var n int
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM pg_catalog.pg_attribute WHERE attrelid = 'public.walbox_schedule_done'::regclass"+
		" AND attname IN ('lsn', 'next_xid') AND NOT attisdropped").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("walbox_schedule_done has %d of the columns lsn and next_xid after migration 019", n)
	}
}

// lockAndReadTombstone is how a sender's transaction starts: it locks m1 (dueRow), then reads its
// tombstone, which holds ACCESS SHARE on walbox_schedule_done.
const lockAndReadTombstone = `SELECT message_id FROM public.walbox_schedule WHERE slot_name = 's' FOR UPDATE SKIP LOCKED;
	SELECT message_id FROM public.walbox_schedule_done WHERE message_id = 'm1' AND state = 'cancelled'`

// A schema as migration 013 left it, migrated to the latest beside a relay sending due messages.
// The pending migrations ran in one transaction: 014 created an index (SHARE on walbox_schedule),
// then 017 waited for ACCESS EXCLUSIVE behind the sender. The sender's delete then waited behind
// 014's SHARE: a deadlock. The batch now takes ACCESS EXCLUSIVE before its first migration. In a
// schema whose name needs quoting, it takes it on that schema's table.
func TestMigrationsFrom013BesideASendingRelay(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	for _, schema := range []string{"public", "Reg istry"} {
		t.Run(schema, func(t *testing.T) {
			db, conn := pg.MigratedDatabase(t, migrations.Config{})
			if schema != "public" {
				pg.Exec(t, db, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
				if _, err := migrations.ApplyRegistry(t.Context(), conn, schema); err != nil {
					t.Fatal(err)
				}
			}
			pg.Exec(t, db, "DROP INDEX "+pgx.Identifier{schema, "walbox_schedule_due_order"}.Sanitize())
			pg.Exec(t, db, "DELETE FROM "+pgx.Identifier{schema, "walbox_migrations"}.Sanitize()+
				" WHERE target = $1 AND version >= 14", "registry:"+schema)
			pg.Exec(t, db, dueRow(schema))
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			migrateBesideADelete(ctx, t, pg, db, conn, schema, 17)
		})
	}
}

// walbox_migrations of a role the migrating one does not trust is ignored: every migration runs
// again. Migration 009 created an index (SHARE), 013 then waited for ACCESS EXCLUSIVE behind the
// sender: the same deadlock, on a schema already at the latest migration.
func TestIgnoredLedgerMigratesBesideASendingRelay(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db, conn := pg.MigratedDatabase(t, migrations.Config{})
	var super bool
	if err := conn.QueryRow(t.Context(), "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user").Scan(&super); err != nil || !super {
		t.Skipf("the test's role is no superuser (%v)", err)
	}
	other := pgx.Identifier{testenv.UniqueName("other")}.Sanitize()
	pg.Exec(t, pg.URL(), "CREATE ROLE "+other)
	t.Cleanup(func() {
		pg.Exec(t, db, "DROP OWNED BY "+other)
		pg.Exec(t, pg.URL(), "DROP ROLE "+other)
	})
	pg.Exec(t, db, "ALTER TABLE public.walbox_migrations OWNER TO "+other)
	pg.Exec(t, db, dueRow("public"))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	migrateBesideADelete(ctx, t, pg, db, conn, "public", 13)
}

// dueRow inserts a due message, m1 of slot s, in the schedule in schema.
func dueRow(schema string) string {
	return "INSERT INTO " + pgx.Identifier{schema, "walbox_schedule"}.Sanitize() + ` (slot_name, message_id, deliver_at, id,
			aggregate_type, aggregate_id, event_type, payload, headers, amqp_id, routing_key, exchange)
		VALUES ('s', 'm1', pg_catalog.now(), pg_catalog.gen_random_uuid(), 'order', '1', 'order.reminder', '{}', '{}', '', '', '')`
}

// migrateBesideADelete is migrateBesideASender in schema. The sender locks m1 (dueRow), then
// deletes it: the broker confirmed.
func migrateBesideADelete(ctx context.Context, t *testing.T, pg *testenv.Postgres, db string, conn *pgx.Conn, schema string, version int) {
	t.Helper()
	table := pgx.Identifier{schema, "walbox_schedule"}.Sanitize()
	migrateBesideASenderIn(ctx, t, pg, db, conn, schema, table, version,
		"SELECT message_id FROM "+table+" WHERE slot_name = 's' FOR UPDATE SKIP LOCKED",
		"DELETE FROM "+table+" WHERE slot_name = 's' AND message_id = 'm1'")
}

// migrateBesideASender runs a sender's transaction: read, then, once migration version waits for it
// on table, finish and commit. The migration must then succeed.
func migrateBesideASender(ctx context.Context, t *testing.T, pg *testenv.Postgres, db string, conn *pgx.Conn, table string, version int, read, finish string) {
	t.Helper()
	migrateBesideASenderIn(ctx, t, pg, db, conn, "public", table, version, read, finish)
}

// migrateBesideASenderIn is migrateBesideASender with the registry in schema.
func migrateBesideASenderIn(ctx context.Context, t *testing.T, pg *testenv.Postgres, db string, conn *pgx.Conn, schema, table string, version int, read, finish string) {
	t.Helper()
	sender, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := sender.Exec(ctx, read); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	migrated, ended := make(chan error, 1), make(chan struct{})
	migrator := pg.Conn(t, db)
	go func() {
		defer close(ended)
		_, err := migrations.ApplyRegistry(ctx, migrator, schema)
		migrated <- err
	}()
	defer func() { cancel(); <-ended }() // before the connection closes
	// The migration waits for the sender's transaction, which has not finished yet.
	check := pg.Conn(t, db)
	for {
		var waiting bool
		if err := check.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
			WHERE NOT l.granted AND l.relation OPERATOR(pg_catalog.=) $1::pg_catalog.regclass)`, table).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case err := <-migrated:
			t.Fatalf("the migration ended (%v) while a sender held a due row", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := sender.Exec(ctx, finish); err != nil {
		t.Fatalf("the sender's statements beside migration %03d: %v", version, err)
	}
	if err := sender.Commit(ctx); err != nil {
		t.Fatalf("the sender's commit beside migration %03d: %v", version, err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("migration %03d beside a sending relay: %v", version, err)
	}
}
