package replication_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/wire"
)

// The publication or the table changes, and is put right again, between two checks of the publication.
// Rows written meanwhile were never decoded, though every check saw a publication that covers the table.
// The relay must notice that what it checked is no longer the same publication and table.
// It must stop before the slot passes those rows.
func TestCoverageChangedBetweenChecksStops(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	for _, tc := range []struct {
		name         string
		break_, mend []string
	}{
		{"table swapped, then added to the publication",
			[]string{"CREATE TABLE outbox_new (LIKE outbox INCLUDING ALL)",
				"ALTER TABLE outbox RENAME TO outbox_old", "ALTER TABLE outbox_new RENAME TO outbox"},
			[]string{"ALTER PUBLICATION walbox ADD TABLE outbox"}},
		{"inserts off, then on again",
			[]string{"ALTER PUBLICATION walbox SET (publish = 'update')"},
			[]string{"ALTER PUBLICATION walbox SET (publish = 'insert')"}},
		{"table dropped from the publication, then added again",
			[]string{"ALTER PUBLICATION walbox DROP TABLE outbox"},
			[]string{"ALTER PUBLICATION walbox ADD TABLE outbox"}},
		{"publication dropped and created again",
			[]string{"DROP PUBLICATION walbox"},
			[]string{"CREATE PUBLICATION walbox FOR TABLE outbox WITH (publish = 'insert')"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, pg, newFakeBroker(true))
			// Idle checks only every two seconds: the change below falls between two of them.
			e.start(func(c *replication.Config) { c.StatusInterval = 2 * time.Second })
			e.insertTx(1, "before")
			e.broker.waitPublished(t, 1)
			time.Sleep(300 * time.Millisecond) // past the status update after the first row

			ctx := context.Background()
			for _, sql := range tc.break_ {
				if _, err := e.conn.Exec(ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			gap := e.currentLSN()
			e.insertTx(3, "in.the.gap")
			for _, sql := range tc.mend {
				if _, err := e.conn.Exec(ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			e.insertTx(1, "after")

			select {
			case err := <-e.done:
				e.done <- err
				// pgoutput may find the publication missing in the WAL it decodes first.
				if !errors.Is(err, replication.ErrNotCovered) && !errors.Is(err, replication.ErrNoPublication) {
					t.Fatalf("Run = %v, want ErrNotCovered", err)
				}
			case <-time.After(8 * time.Second):
				if n := countType(e.broker.messages(), "in.the.gap"); n == 0 && e.slotLSN() > gap {
					t.Fatalf("the relay runs on and the slot passed %s, skipping the %d rows written while the "+
						"publication did not cover the outbox (now at %s)", gap, 3, e.slotLSN())
				}
				t.Fatal("the relay runs on after the publication changed under it")
			}
			if got := e.slotLSN(); got > gap {
				t.Errorf("the slot moved to %s, past %s where the rows not decoded begin", got, gap)
			}
		})
	}
}

// Changes of the publication that leave the outbox covered all along do not stop the relay.
func TestCoverageKeptThroughHarmlessChanges(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.start(func(c *replication.Config) { c.StatusInterval = 100 * time.Millisecond })
	e.insertTx(1, "before")
	e.broker.waitPublished(t, 1)
	ctx := context.Background()
	for _, sql := range []string{
		"CREATE TABLE other (n int)",
		"ALTER PUBLICATION walbox ADD TABLE other",
		"ALTER PUBLICATION walbox SET TABLE outbox, other",
		"ALTER PUBLICATION walbox DROP TABLE other",
		"ALTER TABLE outbox ADD COLUMN note text",
	} {
		if _, err := e.conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	_, before := e.insertTx(1, "after")
	waitFor(t, 10*time.Second, "slot past the last row", func() bool { return e.slotLSN() > before })
	select {
	case err := <-e.done:
		e.done <- err
		t.Fatalf("Run = %v after changes that kept the outbox covered", err)
	default:
	}
}

// A relay with nothing to do writes nothing.
// Its own record of the position must not move the position it records next.
// A keepalive carries the WAL of the record.
// Otherwise an idle database gets a write every status interval, for ever.
// It would never again skip a checkpoint or an archive_timeout segment switch.
// Relays on one database see each other's records as WAL; none may make the others record in turn.
// Each records once past a slot created or recreated later (walbox reshard, walbox recover), then stops.
// On a standby (--replication-url), the records are on the primary and the slots on the standby.
func TestIdleRelayDoesNotWriteForEver(t *testing.T) {
	t.Run("one relay", func(t *testing.T) {
		e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
		idleRelaysDoNotWriteForEver(t, e.db, e.conn, "", []string{e.slot}, false)
	})
	t.Run("three relays and slots created later", func(t *testing.T) {
		e := setup(t, testenv.StartPostgres(t), newFakeBroker(true))
		idleRelaysDoNotWriteForEver(t, e.db, e.conn, "", append([]string{e.slot}, newSlots(t, e.db, e.conn, "", 2)...), true)
	})
	t.Run("two relays on a standby", func(t *testing.T) {
		primary := testenv.StartPostgres(t, testenv.PGVersion(17))
		testenv.RequireOwn(t, primary)
		standby := testenv.StartStandby(t, primary, "standby1", testenv.WithSetting("hot_standby_feedback", "on"))
		db, conn := primary.MigratedDatabase(t, migrations.Config{})
		replURL := testenv.OnStandby(t, db, standby)
		idleRelaysDoNotWriteForEver(t, db, conn, replURL, newSlots(t, db, conn, replURL, 2), true)
	})
}

// newSlots creates n slots of database db, on the server of replURL if it is set.
func newSlots(t *testing.T, db string, conn *pgx.Conn, replURL string, n int) []string {
	t.Helper()
	var opts []slots.SlotOption
	if replURL != "" {
		opts = append(opts, slots.WithReplicationURL(replURL))
	}
	names := make([]string, n)
	for i := range names {
		names[i] = testenv.UniqueName("slot")
		if _, err := slots.EnsureSlot(context.Background(), db, names[i], "walbox", []wire.Table{wire.DefaultTable},
			registry.New(conn, "public"), opts...); err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// idleRelaysDoNotWriteForEver runs a relay on each slot, relays a row, then checks that the idle relays stop recording.
// With later set, it then creates a slot, and recreates it as walbox recover does, checking again after each.
func idleRelaysDoNotWriteForEver(t *testing.T, db string, conn *pgx.Conn, replURL string, names []string, later bool) {
	t.Helper()
	ctx := context.Background()
	reg := registry.New(conn, "public")
	var e *env
	for _, s := range names {
		e = &env{t: t, db: db, conn: conn, slot: s, broker: newFakeBroker(true)}
		e.start(func(c *replication.Config) { c.StatusInterval = 50 * time.Millisecond; c.ReplicationURL = replURL })
	}
	_, before := e.insertTx(1, "one")
	settled := func(what string, past pglogrepl.LSN) {
		t.Helper()
		for _, s := range names {
			waitRecord(t, reg, s, 30*time.Second, "the record of "+s+" past "+what, func(rec registry.Record) bool { return rec.ConfirmedLSN > past })
		}
		time.Sleep(time.Second)
		last := map[string]pglogrepl.LSN{}
		records := 0
		for i := range 40 {
			for _, s := range names {
				rec, _, err := reg.Get(ctx, s)
				if err != nil {
					t.Fatal(err)
				}
				if i > 0 && rec.ConfirmedLSN != last[s] {
					records++
				}
				last[s] = rec.ConfirmedLSN
			}
			time.Sleep(50 * time.Millisecond)
		}
		if records > 2*len(names) {
			t.Fatalf("%d idle relays recorded a new position %d times in 2 s after %s (now %v): each record is WAL "+
				"the next keepalive carries, and so on for ever", len(names), records, what, last)
		}
	}
	settled("the row", before)
	if !later {
		return
	}
	next := newSlots(t, db, conn, replURL, 1)[0]
	created, _, err := reg.Get(ctx, next)
	if err != nil || created.CreatedLSN == 0 {
		t.Fatalf("record of slot %s: %+v, %v", next, created, err)
	}
	settled("a slot created later", created.CreatedLSN-1)
	// walbox recover replaces a lost slot's record with the new slot's consistent point.
	lsn := e.currentLSN()
	created.Origin, created.CreatedLSN, created.ConfirmedLSN = registry.OriginRecovered, lsn, lsn
	if err := reg.Reset(ctx, created); err != nil {
		t.Fatal(err)
	}
	settled("a slot recreated", lsn-1)
}

// An idle relay records an xmin horizon past the rows it relayed, though other WAL follows them.
// walbox prune deletes rows older than every slot's recorded horizon, and no others.
// The recorded horizon is that of a check at or before the recorded position.
// Here WAL of another database follows the rows' commit before the broker confirms them.
// The check before the record reads past the rows, so the record at their end carries an older horizon.
// The relay must record once more, past that check, though only keepalives move it on.
// Its own server: a transaction another test keeps open would hold the horizon back.
func TestIdleRelayRecordsTheHorizonPastItsRows(t *testing.T) {
	pg := testenv.StartPostgres(t)
	e := setup(t, pg, newFakeBroker(false))
	other := pg.Conn(t, pg.NewDatabase(t))
	ctx := context.Background()
	if _, err := other.Exec(ctx, "CREATE TABLE elsewhere (n int)"); err != nil {
		t.Fatal(err)
	}
	e.start(func(c *replication.Config) { c.StatusInterval = time.Second })
	e.insertTx(1, "first")
	e.broker.waitPublished(t, 1)
	e.broker.ack(1)

	e.insertTx(12, "rows")
	if _, err := other.Exec(ctx, "INSERT INTO elsewhere VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	after := e.currentLSN()
	var rows uint64
	if err := e.conn.QueryRow(ctx, "SELECT max(xmin::text::bigint) FROM outbox WHERE event_type = 'rows'").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	e.broker.waitPublished(t, 13)
	waitFor(t, 10*time.Second, "a keepalive past the other database's WAL", func() bool {
		return pglogrepl.LSN(e.relay.Stats().ServerLSN.Load()) >= after
	})
	e.broker.ack(12)
	reg := registry.New(e.conn, "public")
	waitRecord(t, reg, e.slot, 30*time.Second, "the recorded xmin horizon past the rows' transaction", func(rec registry.Record) bool { return rec.ConfirmedXmin > rows })
}

// An idle relay records an xmin horizon past the rows it relayed, though another transaction was open meanwhile.
// That transaction holds back the horizon of every check made before it ends.
// Once it ends, the relay must record once more, past a check whose horizon passes the rows.
// Its own server: another test's open transaction would hold the horizon back for ever.
func TestIdleRelayRecordsTheHorizonPastItsRowsOnceAnOpenTransactionEnds(t *testing.T) {
	pg := testenv.StartPostgres(t)
	e := setup(t, pg, newFakeBroker(true))
	ctx := context.Background()
	e.start(func(c *replication.Config) { c.StatusInterval = 200 * time.Millisecond })
	_, before := e.insertTx(1, "first")
	waitFor(t, 10*time.Second, "slot past the first row", func() bool { return e.slotLSN() > before })
	open, err := pg.Conn(t, e.db).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
		t.Fatal(err)
	}
	_, before = e.insertTx(3, "rows")
	var rows uint64
	if err := e.conn.QueryRow(ctx, "SELECT max(xmin::text::bigint) FROM outbox WHERE event_type = 'rows'").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	reg := registry.New(e.conn, "public")
	waitRecord(t, reg, e.slot, 10*time.Second, "the record past the rows", func(rec registry.Record) bool { return rec.ConfirmedLSN > before })
	if err := open.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitRecord(t, reg, e.slot, 30*time.Second, "the recorded xmin horizon past the rows' transaction", func(rec registry.Record) bool { return rec.ConfirmedXmin > rows })
}

// An idle relay records a position past the consistent point of a slot created later, as a reshard creates a set.
// walbox reshard waits for each old slot's record to pass the new set's consistent point, the cut.
// Creating a slot writes little WAL, and an idle relay records only keepalive steps of 64 KiB or more.
// Its own server: other tests' WAL would take it past the cut.
// A record with a consistent point past the end of WAL must not hide the new slot's.
// A record restored from another server's dump may have one.
func TestIdleRelayRecordsPastASlotCreatedLater(t *testing.T) {
	for _, tc := range []struct{ name, before string }{
		{"alone", ""},
		{"beside a record past the end of WAL", `INSERT INTO walbox_slots (slot_name, system_identifier, timeline, origin, created_lsn, confirmed_lsn)
			VALUES ('restored', '1', 1, 'created', 'FFFFFFFF/0', 'FFFFFFFF/0')`},
	} {
		t.Run(tc.name, func(t *testing.T) { idleRelayRecordsPastASlotCreatedLater(t, tc.before) })
	}
}

func idleRelayRecordsPastASlotCreatedLater(t *testing.T, before string) {
	pg := testenv.StartPostgres(t)
	e := setup(t, pg, newFakeBroker(true))
	if before != "" {
		pg.Exec(t, e.db, before)
	}
	e.start(func(c *replication.Config) { c.StatusInterval = 200 * time.Millisecond })
	_, first := e.insertTx(1, "first")
	waitFor(t, 10*time.Second, "slot past the first row", func() bool { return e.slotLSN() > first })

	ctx := context.Background()
	reg := registry.New(e.conn, "public")
	next := testenv.UniqueName("slot")
	if _, err := slots.EnsureSlot(ctx, e.db, next, "walbox", []wire.Table{wire.DefaultTable}, reg); err != nil {
		t.Fatal(err)
	}
	created, _, err := reg.Get(ctx, next)
	if err != nil || created.CreatedLSN == 0 {
		t.Fatalf("record of slot %s: %+v, %v", next, created, err)
	}
	waitRecord(t, reg, e.slot, 30*time.Second, "the record and the slot past the new slot's consistent point", func(rec registry.Record) bool {
		return rec.ConfirmedLSN >= created.CreatedLSN && e.slotLSN() >= created.CreatedLSN
	})
}

// waitRecord waits up to d for the registry's record of slot to satisfy cond.
func waitRecord(t *testing.T, reg *registry.Store, slot string, d time.Duration, what string, cond func(registry.Record) bool) {
	t.Helper()
	waitFor(t, d, what, func() bool {
		rec, _, err := reg.Get(context.Background(), slot)
		if err != nil {
			t.Fatal(err)
		}
		return cond(rec)
	})
}
