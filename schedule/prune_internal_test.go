package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
)

// A slot around a tombstone's stamp: walbox's record of it, and the server's slot by its name.
type pruneSlot struct {
	record string // "": none; "past"; "behind"; "xmin behind"; "no xmin"; "other system"
	server string // "": none (a standby's slot, or a lost one); "behind": made before the stamp; "past": after
}

// The cases of the prune: which slots there are, and whether a week-old tombstone stays.
var pruneCases = []struct {
	name  string
	slots []pruneSlot
	sent  bool // a sent note, not a tombstone
	bare  bool // a tombstone the stamp missed (its statement failed)
	kept  bool
}{
	{name: "no slot", kept: false},
	{name: "a slot past it", slots: []pruneSlot{{record: "past", server: "past"}}, kept: false},
	{name: "a standby's slot recorded past it", slots: []pruneSlot{{record: "past"}}, kept: false},
	{name: "a slot of a retired set, forgotten", slots: []pruneSlot{{server: "behind"}}, kept: false},
	{name: "a slot behind it", slots: []pruneSlot{{record: "behind", server: "behind"}}, kept: true},
	{name: "a shard behind it", slots: []pruneSlot{{record: "past", server: "past"}, {record: "behind", server: "behind"}}, kept: true},
	{name: "a standby's or lost slot recorded behind it", slots: []pruneSlot{{record: "behind"}}, kept: true},
	{name: "a slot recorded past it whose server slot a crash takes back", slots: []pruneSlot{{record: "past", server: "behind"}}, kept: true},
	{name: "a lost slot whose recover republishes it", slots: []pruneSlot{{record: "xmin behind"}}, kept: true},
	{name: "a slot recorded with no xmin horizon", slots: []pruneSlot{{record: "no xmin"}}, kept: true},
	{name: "a slot recorded on another server", slots: []pruneSlot{{record: "other system"}}, kept: true},
	{name: "a tombstone not stamped", bare: true, kept: true},
	{name: "a sent note, a slot behind it", slots: []pruneSlot{{record: "behind", server: "behind"}}, sent: true, kept: false},
}

// A tombstone stops the record of a cancelled message by a slot that has not read it yet. The prune
// deletes it a week on only once every slot in walbox_slots passed it, by its record and on the server.
func TestATombstoneGoesOnceEverySlotPassedIt(t *testing.T) {
	pg, db, conn := migratedDB(t)
	prunes(t, pg, db, conn, "")
}

// A relay role of `walbox migrate --relay-role` stamps and prunes, in a schema another role owns.
func TestARelayRolePrunesTombstonesOnceEverySlotPassedThem(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	relay, owner := testenv.UniqueName("relay"), testenv.UniqueName("owner")
	pg.Exec(t, pg.URL(), "CREATE ROLE "+pgx.Identifier{relay}.Sanitize()+" LOGIN REPLICATION")
	pg.Exec(t, pg.URL(), "CREATE ROLE "+pgx.Identifier{owner}.Sanitize())
	db, conn := pg.MigratedDatabase(t, migrations.Config{RelayRole: relay})
	t.Cleanup(func() {
		_ = execSQLOn(db, "DROP OWNED BY "+pgx.Identifier{relay}.Sanitize()+", "+pgx.Identifier{owner}.Sanitize())
		_ = execSQLOn(pg.URL(), "DROP ROLE "+pgx.Identifier{relay}.Sanitize()+", "+pgx.Identifier{owner}.Sanitize())
	})
	pg.Exec(t, db, "ALTER TABLE public.walbox_slots OWNER TO "+pgx.Identifier{owner}.Sanitize()+
		"; ALTER TABLE public.walbox_schedule OWNER TO "+pgx.Identifier{owner}.Sanitize()+
		"; ALTER TABLE public.walbox_schedule_done OWNER TO "+pgx.Identifier{owner}.Sanitize())
	prunes(t, pg, db, conn, relay)
}

// prunes runs pruneCases in db, the stamp and the prune as role ("": the connection's own).
func prunes(t *testing.T, pg *testenv.Postgres, db string, conn *pgx.Conn, role string) {
	ctx := t.Context()
	tb := tablesIn("public")
	as := func(sql string) {
		t.Helper()
		if role != "" {
			if _, err := conn.Exec(ctx, "SET ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if _, err := conn.Exec(context.WithoutCancel(ctx), "RESET ROLE"); err != nil {
					t.Fatal(err)
				}
			}()
		}
		if _, err := conn.Exec(ctx, sql, DoneRetention.Seconds()); err != nil {
			t.Fatal(err)
		}
	}
	var system string
	if err := conn.QueryRow(ctx, "SELECT system_identifier::pg_catalog.text FROM pg_catalog.pg_control_system()").Scan(&system); err != nil {
		t.Fatal(err)
	}
	for _, c := range pruneCases {
		t.Run(c.name, func(t *testing.T) {
			pg.Exec(t, db, "DELETE FROM walbox_slots; DELETE FROM walbox_schedule_done")
			names := make([]string, len(c.slots))
			made := func(server string) {
				for i, s := range c.slots {
					if s.server == server {
						names[i] = testenv.UniqueName("prune")
						pg.Exec(t, db, "SELECT pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput')", names[i])
						t.Cleanup(func() { _ = execSQLOn(db, "SELECT pg_catalog.pg_drop_replication_slot('"+names[i]+"')") })
					}
				}
			}
			made("behind")
			id := uuid.NewString()
			if c.sent {
				pg.Exec(t, db, "INSERT INTO walbox_schedule_done (message_id, slot_name, state, sent_by) VALUES ($1, '', 'sent', '{s}')", id)
			} else {
				pg.Exec(t, db, "SELECT walbox_cancel($1::text)", id)
			}
			pg.Exec(t, db, "UPDATE walbox_schedule_done SET done_at = pg_catalog.now() - interval '8 days'")
			if !c.bare {
				as(tb.stampSQL())
			}
			var lsn, xid *string
			if err := conn.QueryRow(ctx, "SELECT lsn::pg_catalog.text, next_xid::pg_catalog.text FROM walbox_schedule_done").Scan(&lsn, &xid); err != nil {
				t.Fatal(err)
			}
			if (lsn == nil || xid == nil) != (c.sent || c.bare) {
				t.Fatalf("stamped %v %v; want a stamp on a tombstone only", lsn, xid)
			}
			made("past")
			for i, s := range c.slots {
				if s.record == "" {
					continue
				}
				if names[i] == "" {
					names[i] = testenv.UniqueName("prune")
				}
				recLSN, recXmin, recSystem := lsn, xid, system
				behind, old := "0/1", "3"
				switch s.record {
				case "behind":
					recLSN = &behind
				case "xmin behind":
					recXmin = &old
				case "no xmin":
					recXmin = nil
				case "other system":
					recSystem = "1"
				}
				if c.sent {
					recLSN, recXmin = &behind, &old
				}
				pg.Exec(t, db, `INSERT INTO walbox_slots (slot_name, system_identifier, timeline, origin, confirmed_lsn, confirmed_xmin)
					VALUES ($1, $2, 1, 'created', $3::pg_catalog.pg_lsn, $4::pg_catalog.xid8)`, names[i], recSystem, recLSN, recXmin)
			}
			as(tb.pruneSQL())
			var left int
			if err := conn.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM walbox_schedule_done").Scan(&left); err != nil {
				t.Fatal(err)
			}
			if kept := left == 1; kept != c.kept {
				t.Errorf("the week-old row kept: %v; want %v", kept, c.kept)
			}
		})
	}
}

// execSQLOn runs q on the database at url, for a cleanup.
func execSQLOn(url, q string) error {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, q)
	return err
}

// A migration from a schema before 018 runs while a batch awaits its confirms and the hourly prune
// starts. The migration locks walbox_schedule, then alters walbox_schedule_done. The prune took the
// done table first, then waited behind the migration for the schedule: a deadlock, and migrate failed.
func TestThePruneAndAMigrationBesideASendingBatchDoNotDeadlock(t *testing.T) {
	pg, db, conn := migratedDB(t)
	pg.Exec(t, db, `DROP INDEX public.walbox_schedule_due_order;
		ALTER TABLE public.walbox_schedule_done DROP COLUMN sent_by, DROP COLUMN lsn, DROP COLUMN next_xid;
		DELETE FROM public.walbox_migrations WHERE target = 'registry:public' AND version >= 17;
		INSERT INTO public.walbox_schedule (slot_name, message_id, deliver_at, id, aggregate_type, aggregate_id,
			event_type, payload, headers, amqp_id, routing_key, exchange)
		VALUES ('s', 'm1', pg_catalog.now(), pg_catalog.gen_random_uuid(), 'order', '1', 'order.reminder', '{}', '{}', '', '', '')`)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	batch, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer batch.Rollback(ctx) //nolint:errcheck // a no-op after its commit
	if _, err := batch.Exec(ctx, "SELECT message_id FROM public.walbox_schedule WHERE slot_name = 's' FOR UPDATE SKIP LOCKED"); err != nil {
		t.Fatal(err)
	}
	migrated := make(chan error, 1)
	migrator := pg.Conn(t, db)
	go func() { _, err := migrations.ApplyRegistry(ctx, migrator, "public"); migrated <- err }()
	check := pg.Conn(t, db)
	waiting := func(n int) {
		t.Helper()
		for {
			var w int
			if err := check.QueryRow(ctx, `SELECT pg_catalog.count(*)::int FROM pg_catalog.pg_locks l
				WHERE NOT l.granted AND l.relation = 'public.walbox_schedule'::pg_catalog.regclass`).Scan(&w); err != nil {
				t.Fatal(err)
			}
			if w >= n {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waiting(1) // the migration, behind the batch
	s := NewSender(SenderConfig{DatabaseURL: db, Schema: "public", Slot: "s"})
	s.conn = pg.Conn(t, db)
	pruned := make(chan error, 1)
	go func() { pruned <- s.prune(ctx) }()
	waiting(2)                  // the prune, behind the migration
	time.Sleep(2 * time.Second) // past deadlock_timeout, as a batch's confirms may take
	if _, err := batch.Exec(ctx, "DELETE FROM public.walbox_schedule WHERE slot_name = 's' AND message_id = 'm1'"); err != nil {
		t.Fatal(err)
	}
	if err := batch.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Errorf("migrate beside a sending batch and the prune: %v", err)
	}
	if err := <-pruned; err != nil {
		t.Errorf("the prune beside a migration: %v", err)
	}
}
