package replication_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/wire"
)

// The refusal to recreate a dropped slot lives in the database.
// A new Relay, as a supervisor's restart makes, refuses as the one that saw the slot vanish did.
// It refuses even with CreateSlot on.
func TestDroppedSlotIsRefusedAfterARestart(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.start(nil)
	e.insertTx(1, "one")
	e.broker.waitPublished(t, 1)
	e.dropSlot()
	ctx := context.Background()
	if err := e.wait(20 * time.Second); !errors.Is(err, replication.ErrSlotMissing) {
		t.Fatalf("Run = %v, want ErrSlotMissing", err)
	}
	yes := true
	again := &env{t: t, pg: e.pg, db: e.db, conn: e.conn, slot: e.slot, broker: newFakeBroker(true)}
	again.start(func(c *replication.Config) { c.CreateSlot = &yes })
	if err := again.wait(20 * time.Second); !errors.Is(err, replication.ErrSlotMissing) {
		t.Fatalf("a new relay: Run = %v, want ErrSlotMissing", err)
	}
	var n int
	if err := e.conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", e.slot).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("a new relay recreated the recorded slot")
	}
}

// A slot advanced behind walbox's back (pg_replication_slot_advance) is ahead of the record.
// The rows it skipped were never relayed, so the relay refuses it.
func TestAdvancedSlotIsAGap(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.insertTx(3, "skipped")
	if _, err := e.conn.Exec(context.Background(), "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", e.slot); err != nil {
		t.Fatal(err)
	}
	e.start(nil)
	if err := e.wait(20 * time.Second); !errors.Is(err, replication.ErrSlotGap) {
		t.Fatalf("Run = %v, want ErrSlotGap", err)
	}
	if n := len(e.broker.messages()); n != 0 {
		t.Errorf("published %d messages from an advanced slot", n)
	}
}

// The registry has a position before the server does.
// Sampled again and again while the slot moves, the slot (read first) is never ahead of the record (read second).
func TestPositionIsRecordedBeforeItIsReported(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.start(func(c *replication.Config) { c.StatusInterval = 20 * time.Millisecond })
	reg := registry.New(e.conn, "public")
	ctx := context.Background()
	var moved int
	last := e.slotLSN()
	for i := range 200 {
		if i%4 == 0 {
			e.insertTx(5, "tick")
		}
		slot := e.slotLSN()
		rec, ok, err := reg.Get(ctx, e.slot)
		if err != nil || !ok {
			t.Fatalf("record of %s: %v, %v", e.slot, ok, err)
		}
		if slot > rec.ConfirmedLSN {
			t.Fatalf("the slot is at %s, ahead of the recorded %s", slot, rec.ConfirmedLSN)
		}
		if slot != last {
			moved++
			last = slot
		}
		time.Sleep(5 * time.Millisecond)
	}
	if moved < 10 {
		t.Fatalf("the slot moved only %d times: the test proved little", moved)
	}
}

// A position that moves and then stays is reported within about 100 ms, not at the next status interval.
// A relay killed after a burst then sends again little more than its window.
func TestMovingPositionIsReportedSoon(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.start(func(c *replication.Config) { c.StatusInterval = 10 * time.Second })
	waitFor(t, 10*time.Second, "a publishing session", func() bool { return e.broker.sessionCount() > 0 })
	time.Sleep(300 * time.Millisecond) // past the first status update of the session
	_, before := e.insertTx(1, "one")
	start := time.Now()
	waitFor(t, 5*time.Second, "the slot to pass the transaction", func() bool { return e.slotLSN() > before })
	t.Logf("reported %v after the commit (status interval 10 s)", time.Since(start).Round(time.Millisecond))
}

// The registry lives in the schema of Config.Table (--table).
// With tables in two schemas, the one the relay looks in must not depend on the order of the tables.
// With the tables listed the other way round, a relay found no record where it looked.
// It recreated a dropped slot, skipping every row committed since.
func TestRecordIsFoundWhateverTheOrderOfTheTables(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	ctx := context.Background()
	for _, sql := range []string{
		"CREATE SCHEMA billing",
		"CREATE TABLE billing.outbox (LIKE public.outbox INCLUDING ALL)",
		"ALTER PUBLICATION walbox ADD TABLE billing.outbox",
	} {
		if _, err := e.conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	public := wire.Mapping{Table: wire.DefaultTable}.WithDefaults()
	billing := wire.Mapping{Table: wire.Table{Schema: "billing", Name: "outbox"}}.WithDefaults()
	e.start(func(c *replication.Config) { c.Mappings = []wire.Mapping{public, billing} })
	_, before := e.insertTx(1, "one")
	waitFor(t, 10*time.Second, "slot past the row", func() bool { return e.slotLSN() > before })
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	e.dropSlot()

	yes := true
	again := &env{t: t, pg: e.pg, db: e.db, conn: e.conn, slot: e.slot, broker: newFakeBroker(true)}
	again.start(func(c *replication.Config) {
		c.Mappings, c.CreateSlot = []wire.Mapping{billing, public}, &yes
	})
	if err := again.wait(20 * time.Second); !errors.Is(err, replication.ErrSlotMissing) {
		t.Fatalf("with the tables in the other order: Run = %v, want ErrSlotMissing", err)
	}
}

// A table may be swapped in while no walbox runs, and added to the publication before the next start.
// The publication then covers the outbox again by name.
// Only the coverage recorded for the slot shows that rows written in between were never decoded.
func TestCoverageChangedWhileStoppedIsRefused(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.start(nil)
	e.insertTx(1, "one")
	e.broker.waitPublished(t, 1)
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	e.swapTableWithRowsInTheGap("outbox")
	again := &env{t: t, pg: e.pg, db: e.db, conn: e.conn, slot: e.slot, broker: newFakeBroker(true)}
	again.start(nil)
	if err := again.wait(20 * time.Second); !errors.Is(err, replication.ErrNotCovered) || !strings.Contains(err.Error(), "recover") {
		t.Fatalf("Run = %v, want ErrNotCovered naming walbox recover", err)
	}
}

// The same change before any walbox ever ran on the slot.
// The commands walbox migrate and walbox reshard create the slot and its record ahead of the first relay.
// That relay may start much later. Rows
// written in between were never decoded all the same.
func TestCoverageChangedBeforeTheFirstRunIsRefused(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true)) // the slot exists, recorded as migrate records it
	e.swapTableWithRowsInTheGap("outbox")
	e.start(nil)
	if err := e.wait(20 * time.Second); !errors.Is(err, replication.ErrNotCovered) || !strings.Contains(err.Error(), "recover") {
		t.Fatalf("Run = %v (published %d), want ErrNotCovered naming walbox recover", err, len(e.broker.messages()))
	}
}

// A relay may start with more tables than the slot's record has.
// A table was mapped and added to the publication after walbox migrate created the slot.
// The record then takes the table in.
// So a later swap of that table while no walbox runs is refused as well.
func TestCoverageWidensForAMappedTable(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	ctx := context.Background()
	for _, sql := range []string{
		"CREATE TABLE events (LIKE outbox INCLUDING ALL)",
		"ALTER PUBLICATION walbox ADD TABLE events",
	} {
		if _, err := e.conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	mapped := func(c *replication.Config) {
		c.Mappings = []wire.Mapping{wire.Mapping{Table: wire.DefaultTable}.WithDefaults(),
			wire.Mapping{Table: wire.Table{Schema: "public", Name: "events"}}.WithDefaults()}
	}
	e.start(mapped)
	e.insertInto("events", "mapped")
	e.broker.waitPublished(t, 1)
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	var coverage string
	if err := e.conn.QueryRow(ctx, "SELECT coverage FROM walbox_slots WHERE slot_name = $1", e.slot).Scan(&coverage); err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(coverage[strings.Index(coverage, "tables")+len("tables"):])); n != 2 {
		t.Fatalf("recorded coverage %q has %d tables, want both", coverage, n)
	}

	e.swapTableWithRowsInTheGap("events")
	again := &env{t: t, pg: e.pg, db: e.db, conn: e.conn, slot: e.slot, broker: newFakeBroker(true)}
	again.start(mapped)
	if err := again.wait(20 * time.Second); !errors.Is(err, replication.ErrNotCovered) {
		t.Fatalf("Run = %v, want ErrNotCovered: the mapped table was swapped while no walbox ran", err)
	}
}

// swapTableWithRowsInTheGap renames a new copy of table into place.
// It commits a row to it while the publication still has the old one (never decoded).
// Then it adds it to the publication.
func (e *env) swapTableWithRowsInTheGap(table string) {
	e.t.Helper()
	ctx := context.Background()
	for _, sql := range []string{
		"CREATE TABLE " + table + "_new (LIKE " + table + " INCLUDING ALL)",
		"ALTER TABLE " + table + " RENAME TO " + table + "_old",
		"ALTER TABLE " + table + "_new RENAME TO " + table,
	} {
		if _, err := e.conn.Exec(ctx, sql); err != nil {
			e.t.Fatal(err)
		}
	}
	e.insertInto(table, "in the gap")
	if _, err := e.conn.Exec(ctx, "ALTER PUBLICATION walbox ADD TABLE "+table); err != nil {
		e.t.Fatal(err)
	}
}

// insertInto commits one row to table, which has the default contract.
func (e *env) insertInto(table, eventType string) {
	e.t.Helper()
	_, err := e.conn.Exec(context.Background(), "INSERT INTO "+table+` (id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ($1, 'order', '1', $2, '{}')`, uuid.New(), eventType)
	if err != nil {
		e.t.Fatal(err)
	}
}

// A confirm may arrive while the relay waits on a quiet replication connection.
// It is applied as it arrives, and the position it moves is reported within about 100 ms.
// The report does not wait for the server to send something, nor for the next status interval.
func TestConfirmOnAQuietConnectionIsReportedSoon(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(false))
	e.start(func(c *replication.Config) { c.StatusInterval = 10 * time.Second })
	_, before := e.insertTx(1, "one")
	e.broker.waitPublished(t, 1)
	time.Sleep(300 * time.Millisecond) // the relay has read everything and waits
	start := time.Now()
	e.broker.ack(1)
	waitFor(t, 5*time.Second, "the slot to pass the confirmed transaction", func() bool { return e.slotLSN() > before })
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("reported %v after the confirm, want well under the status interval (10 s)", d.Round(time.Millisecond))
	}
	t.Logf("reported %v after the confirm (status interval 10 s)", time.Since(start).Round(time.Millisecond))
}

// The stream's goroutine runs no SQL.
// While the registry write of a position waits on a lock, the stream goes on publishing what it reads.
// The write is bounded (5 s).
// A stream that waited on it would publish the next transaction only after that, in a new session.
func TestPublishingGoesOnWhileTheRecordWaits(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.start(func(c *replication.Config) { c.StatusInterval = 50 * time.Millisecond })
	ctx := context.Background()
	e.insertTx(1, "first")
	e.broker.waitPublished(t, 1)
	time.Sleep(300 * time.Millisecond) // recorded and reported

	lock, err := e.pg.Conn(t, e.db).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, "SELECT 1 FROM public.walbox_slots WHERE slot_name = $1 FOR UPDATE", e.slot); err != nil {
		t.Fatal(err)
	}
	e.insertTx(1, "second")
	e.broker.waitPublished(t, 2)
	time.Sleep(300 * time.Millisecond) // its confirm moved the watermark: recording it now waits on the lock

	start := time.Now()
	e.insertTx(1, "third")
	e.broker.waitPublished(t, 3)
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("published the next transaction %v after its commit, while the record waited", d.Round(time.Millisecond))
	}
	if got := e.broker.sessionCount(); got != 1 {
		t.Fatalf("%d publishing sessions, want 1", got)
	}
	t.Logf("published %v after the commit, while the record waited", time.Since(start).Round(time.Millisecond))
}
