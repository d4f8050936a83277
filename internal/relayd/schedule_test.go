package relayd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walbox/walbox/internal/relayd"
	"github.com/walbox/walbox/internal/status"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/schedule"
	"github.com/walbox/walbox/wire"
)

// arrivals consumes every message of exchange into a queue of the test's own. It notes when each
// message id arrived, and how many times.
type arrivals struct {
	mu     sync.Mutex
	at     map[string]time.Time
	count  map[string]int
	commit map[string]bool // whether it carried its commit time
}

func consume(t *testing.T, url, exchange string) *arrivals {
	t.Helper()
	ds := testenv.Bind(t, testenv.Channel(t, url), exchange, "#")
	a := &arrivals{at: map[string]time.Time{}, count: map[string]int{}, commit: map[string]bool{}}
	go func() {
		for d := range ds {
			a.mu.Lock()
			if a.count[d.MessageId] == 0 {
				a.at[d.MessageId] = time.Now()
			}
			a.count[d.MessageId]++
			_, a.commit[d.MessageId] = d.Headers[wire.HeaderCommitTime]
			a.mu.Unlock()
		}
	}()
	return a
}

func (a *arrivals) get(id string) (time.Time, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.at[id], a.count[id]
}

// dbNow reads the database's clock.
func dbNow(t *testing.T, conn *pgx.Conn) time.Time {
	t.Helper()
	var now time.Time
	if err := conn.QueryRow(context.Background(), "SELECT pg_catalog.clock_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// A row due later is held in the schedule while its slot moves on past it. It leaves once due and
// not before, from a table row, a row deleted in its own transaction and walbox_emit alike. A
// cancel before its time wins and says so; a cancel after it left says it was sent. So on one
// channel, and over publishing lanes.
func TestScheduledMessagesLeaveOnTimeWhileTheSlotMovesOn(t *testing.T) {
	for _, lanes := range []int{1, 3} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) { scheduledLeaveOnTime(t, lanes) })
	}
}

func scheduledLeaveOnTime(t *testing.T, lanes int) {
	cfg, pg, db := config(t)
	cfg.Lanes = lanes
	d, _, _ := start(t, cfg)
	eventually(t, "streaming", func() bool { return d.Stats().Streaming.Load() })
	got := consume(t, testenv.SharedRabbit(t).URL(), cfg.Brokers.Configs()[0].Exchange)
	conn := pg.Conn(t, db)
	ctx := context.Background()

	const wait = 6 * time.Second
	due := dbNow(t, conn).Add(wait)
	msg := func(deliverAt time.Time) outbox.Message {
		id, _ := uuid.NewV7()
		return outbox.Message{ID: id, AggregateType: "order", AggregateID: "1", EventType: "order.reminder",
			Payload: []byte(`{"n":1}`), DeliverAt: deliverAt}
	}
	row, gone, emitted, cancelled, now := msg(due), msg(due), msg(due), msg(due), msg(time.Time{})
	var insertLSN string
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := outbox.Write(ctx, tx, row, now); err != nil {
			return err
		}
		if err := outbox.NewWriter(outbox.DefaultTable, outbox.DeleteAfterInsert()).Write(ctx, tx, gone); err != nil {
			return err
		}
		if err := outbox.Emit(ctx, tx, emitted, cancelled); err != nil {
			return err
		}
		// Before the commit record: the slot is past the rows once past this.
		return tx.QueryRow(ctx, "SELECT pg_catalog.pg_current_wal_insert_lsn()::text").Scan(&insertLSN)
	})
	if err != nil {
		t.Fatal(err)
	}

	eventually(t, "the message without deliver_at", func() bool { _, n := got.get(now.ID.String()); return n == 1 })
	eventually(t, "the slot past the scheduled rows while they wait", func() bool {
		var past bool
		err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn > $1::pg_lsn FROM pg_catalog.pg_replication_slots WHERE slot_name = $2",
			insertLSN, cfg.Relay.Slot).Scan(&past)
		return err == nil && past
	})
	if dbNow(t, conn).After(due) {
		t.Fatalf("the slot passed the rows only after they were due; wait longer than %s", wait)
	}
	st, err := status.Read(ctx, conn, status.Query{Slot: cfg.Relay.Slot, Table: outbox.DefaultTable})
	if err != nil {
		t.Fatal(err)
	}
	if sc := st.Schedule; sc == nil || sc.Waiting != 4 || sc.NextDue == nil || !sc.NextDue.Equal(due.Truncate(time.Microsecond)) {
		t.Errorf("status shows the schedule as %+v, want 4 waiting, next due %s", sc, due)
	}
	var ok bool
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) (err error) { ok, err = outbox.Cancel(ctx, tx, cancelled.ID); return err })
	if err != nil || !ok {
		t.Fatalf("Cancel before due: %v, %v; want true", ok, err)
	}

	for _, m := range []outbox.Message{row, gone, emitted} {
		eventually(t, "scheduled message "+m.ID.String(), func() bool { _, n := got.get(m.ID.String()); return n > 0 })
		at, n := got.get(m.ID.String())
		if at.Before(due) {
			t.Errorf("message %s arrived %s before its deliver_at", m.ID, due.Sub(at))
		}
		if n != 1 {
			t.Errorf("message %s arrived %d times, want once", m.ID, n)
		}
		got.mu.Lock()
		if !got.commit[m.ID.String()] {
			t.Errorf("message %s arrived without %s", m.ID, wire.HeaderCommitTime)
		}
		got.mu.Unlock()
	}
	neverArrives(t, conn, got, cancelled.ID.String())
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) (err error) { ok, err = outbox.Cancel(ctx, tx, row.ID); return err })
	if err != nil || ok {
		t.Errorf("Cancel after sent: %v, %v; want false", ok, err)
	}
	if replication.State(d.Stats().State.Load()) != replication.StateStreaming {
		t.Errorf("relay state %v, want streaming", replication.State(d.Stats().State.Load()))
	}
}

// A message in the schedule of a slot walbox no longer records (a shard set retired by walbox
// reshard --retire) is sent by the relay of another slot when due.
func TestScheduleOfARetiredSlotIsSentByAnotherRelay(t *testing.T) {
	cfg, pg, db := config(t)
	d, _, _ := start(t, cfg)
	eventually(t, "streaming", func() bool { return d.Stats().Streaming.Load() })
	got := consume(t, testenv.SharedRabbit(t).URL(), cfg.Brokers.Configs()[0].Exchange)
	id := uuid.New()
	pg.Exec(t, db, `INSERT INTO walbox_schedule (slot_name, message_id, deliver_at, id, aggregate_type, aggregate_id,
		event_type, payload, headers, amqp_id, routing_key, exchange)
		VALUES ('retired_s0of2', $1::text, pg_catalog.now(), $1::uuid, 'order', '1', 'order.reminder', '{}', '{}', '', '', '')`, id.String())
	eventually(t, "the retired slot's message", func() bool { _, n := got.get(id.String()); return n == 1 })
}

// lineCounter counts the log lines that contain a text, and passes every line to the test's log.
type lineCounter struct {
	testWriter
	text  string
	mu    sync.Mutex
	n     int
	lines []string // the lines that contain text
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	if k := strings.Count(string(p), c.text); k > 0 {
		c.n += k
		c.lines = append(c.lines, string(p))
	}
	c.mu.Unlock()
	return c.testWriter.Write(p)
}

func (c *lineCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// startCounting starts a relay of cfg whose log counts the lines holding text, and waits until it
// streams. It returns the count, and what the relay's exchange receives.
func startCounting(t *testing.T, cfg relayd.Config, text string) (*lineCounter, *arrivals) {
	t.Helper()
	logs := &lineCounter{testWriter: testWriter{t}, text: text}
	cfg.Relay.Logger = slog.New(slog.NewTextHandler(logs, nil))
	d, _, _ := start(t, cfg)
	eventually(t, "streaming", func() bool { return d.Stats().Streaming.Load() })
	return logs, consume(t, testenv.SharedRabbit(t).URL(), cfg.Brokers.Configs()[0].Exchange)
}

// A relay with nothing scheduled keeps one broker session. The schedule's sender dials its own
// only once a message is due. A second session confused which node the relay used on a cluster.
func TestEmptyScheduleOpensNoSecondBrokerSession(t *testing.T) {
	cfg, pg, db := config(t)
	logs, got := startCounting(t, cfg, "connected to broker")
	conn := pg.Conn(t, db)
	ctx := context.Background()
	id, _ := uuid.NewV7()
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		return outbox.Write(ctx, tx, outbox.Message{ID: id, AggregateType: "order", AggregateID: "1", EventType: "order.placed", Payload: []byte(`{}`)})
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the row relayed", func() bool { _, n := got.get(id.String()); return n == 1 })
	// The sender polls every DefaultPoll; give it several turns.
	time.Sleep(4 * schedule.DefaultPoll)
	if n := logs.count(); n != 1 {
		t.Fatalf("the relay connected to the broker %d times with nothing scheduled, want once", n)
	}
}

// A record the schedule refuses is no confirm. The session ends with an error that names the
// schedule and its cause, and the slot stays before the row. Once the schedule takes records again,
// the message is recorded and leaves when due.
func TestRefusedRecordHoldsTheSlotAndNamesTheSchedule(t *testing.T) {
	cfg, pg, db := config(t)
	logs, got := startCounting(t, cfg, "refused by the test")
	conn := pg.Conn(t, db)
	ctx := context.Background()
	pg.Exec(t, db, `CREATE FUNCTION refuse_record() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN RAISE EXCEPTION 'refused by the test'; END$$`)
	pg.Exec(t, db, `CREATE TRIGGER refuse BEFORE INSERT ON walbox_schedule FOR EACH ROW EXECUTE FUNCTION refuse_record()`)

	due := dbNow(t, conn).Add(8 * time.Second)
	scheduled, _ := uuid.NewV7()
	var insertLSN string
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		err := outbox.Write(ctx, tx, outbox.Message{ID: scheduled, AggregateType: "order", AggregateID: "1",
			EventType: "order.reminder", Payload: []byte(`{}`), DeliverAt: due})
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT pg_catalog.pg_current_wal_insert_lsn()::text").Scan(&insertLSN)
	})
	if err != nil {
		t.Fatal(err)
	}
	// A later message the broker confirms: its confirm must not carry the slot past the refused row.
	later, _ := uuid.NewV7()
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		return outbox.Write(ctx, tx, outbox.Message{ID: later, AggregateType: "order", AggregateID: "1", EventType: "order.placed", Payload: []byte(`{}`)})
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the later message", func() bool { _, n := got.get(later.String()); return n > 0 })
	eventually(t, "two refused records", func() bool { return logs.count() >= 2 })
	var past bool
	err = conn.QueryRow(ctx, "SELECT confirmed_flush_lsn > $1::pg_lsn FROM pg_catalog.pg_replication_slots WHERE slot_name = $2",
		insertLSN, cfg.Relay.Slot).Scan(&past)
	if err != nil {
		t.Fatal(err)
	}
	if past {
		t.Fatal("the slot moved past a scheduled row whose record was refused")
	}
	logs.mu.Lock()
	lines := logs.lines
	logs.mu.Unlock()
	for _, l := range lines {
		if strings.Contains(l, "refused by the test") && (!strings.Contains(l, "walbox_schedule") || strings.Contains(l, "broker did not confirm")) {
			t.Errorf("the error does not name the schedule, or blames the broker: %s", l)
		}
	}

	pg.Exec(t, db, `DROP TRIGGER refuse ON walbox_schedule`)
	eventually(t, "the scheduled message", func() bool { _, n := got.get(scheduled.String()); return n > 0 })
	if at, _ := got.get(scheduled.String()); at.Before(due) {
		t.Errorf("the scheduled message arrived %s before its deliver_at", due.Sub(at))
	}
}

// A record is the row's confirm, so it must be on disk when its commit returns. With
// synchronous_commit off for the database, a crash could lose a committed record while the slot,
// saved at once, stays past its row. The relay's record commits with synchronous_commit on.
func TestRecordCommitsDurablyWhenTheDatabaseCommitsAsynchronously(t *testing.T) {
	cfg, pg, db := config(t)
	pg.Exec(t, db, `DO $$ BEGIN EXECUTE pg_catalog.format('ALTER DATABASE %I SET synchronous_commit = off', pg_catalog.current_database()); END $$`)
	pg.Exec(t, db, `CREATE TABLE record_commits (setting text)`)
	pg.Exec(t, db, `CREATE FUNCTION note_commit() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN INSERT INTO public.record_commits VALUES (pg_catalog.current_setting('synchronous_commit')); RETURN NEW; END$$`)
	pg.Exec(t, db, `CREATE TRIGGER note BEFORE INSERT ON walbox_schedule FOR EACH ROW EXECUTE FUNCTION note_commit()`)
	d, _, _ := start(t, cfg)
	eventually(t, "streaming", func() bool { return d.Stats().Streaming.Load() })
	conn := pg.Conn(t, db)
	ctx := context.Background()
	id, _ := uuid.NewV7()
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		return outbox.Write(ctx, tx, outbox.Message{ID: id, AggregateType: "order", AggregateID: "1",
			EventType: "order.reminder", Payload: []byte(`{}`), DeliverAt: dbNow(t, conn).Add(time.Hour)})
	})
	if err != nil {
		t.Fatal(err)
	}
	var setting string
	eventually(t, "the record", func() bool {
		return conn.QueryRow(ctx, "SELECT setting FROM record_commits").Scan(&setting) == nil
	})
	if setting == "off" {
		t.Errorf("the record committed with synchronous_commit %s; want it flushed before the slot moves past its row", setting)
	}
}

// A cancel that said true wins, even while its transaction is still open when the message falls due.
// Its tombstone is not visible yet, so the relay records the row and finds it due. The relay must
// not send it while the cancel is undecided: the cancel's commit stops it.
func TestOpenCancelHoldsADueMessageUntilItCommits(t *testing.T) {
	cfg, pg, db := config(t)
	d, _, _ := start(t, cfg)
	eventually(t, "streaming", func() bool { return d.Stats().Streaming.Load() })
	got := consume(t, testenv.SharedRabbit(t).URL(), cfg.Brokers.Configs()[0].Exchange)
	ctx := context.Background()
	canceller, conn := pg.Conn(t, db), pg.Conn(t, db)
	id, _ := uuid.NewV7()
	tx, err := canceller.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if ok, err := outbox.Cancel(ctx, tx, id); err != nil || !ok {
		t.Fatalf("Cancel: %v, %v; want true", ok, err)
	}
	due := dbNow(t, conn).Add(time.Second)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		return outbox.Write(ctx, tx, outbox.Message{ID: id, AggregateType: "order", AggregateID: "1",
			EventType: "order.reminder", Payload: []byte(`{}`), DeliverAt: due})
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the record", func() bool {
		var n int
		return conn.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM walbox_schedule").Scan(&n) == nil && n == 1
	})
	for !dbNow(t, conn).After(due.Add(3 * time.Second)) {
		time.Sleep(100 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the schedule empty", func() bool {
		var n int
		return conn.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM walbox_schedule").Scan(&n) == nil && n == 0
	})
	if _, n := got.get(id.String()); n != 0 {
		t.Errorf("the message whose cancel said true arrived %d times", n)
	}
}

// A cancel in a REPEATABLE READ transaction whose snapshot predates the message's sending does not
// say true: it fails with a serialization error (40001), to be retried, or says false.
func TestCancelInAnOlderSnapshotDoesNotSayWaitingForASentMessage(t *testing.T) {
	cfg, pg, db := config(t)
	d, _, _ := start(t, cfg)
	eventually(t, "streaming", func() bool { return d.Stats().Streaming.Load() })
	got := consume(t, testenv.SharedRabbit(t).URL(), cfg.Brokers.Configs()[0].Exchange)
	ctx := context.Background()
	canceller, conn := pg.Conn(t, db), pg.Conn(t, db)
	tx, err := canceller.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)                              //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil { // the snapshot
		t.Fatal(err)
	}
	id, _ := uuid.NewV7()
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		return outbox.Write(ctx, tx, outbox.Message{ID: id, AggregateType: "order", AggregateID: "1",
			EventType: "order.reminder", Payload: []byte(`{}`), DeliverAt: dbNow(t, conn).Add(time.Second)})
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the message sent", func() bool { _, n := got.get(id.String()); return n > 0 })
	eventually(t, "the schedule empty", func() bool {
		var n int
		return conn.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM walbox_schedule").Scan(&n) == nil && n == 0
	})
	ok, err := outbox.Cancel(ctx, tx, id)
	var pgErr *pgconn.PgError
	if err == nil && ok {
		t.Fatal("a cancel in a snapshot older than the sending said true for a message that left")
	}
	if err != nil && (!errors.As(err, &pgErr) || pgErr.Code != "40001") {
		t.Fatalf("cancel: %v; want false or a serialization failure", err)
	}
}

// A row cancelled before its time, and read by the relay only after it, never leaves. The relay
// was down meanwhile. The row is due when read, yet its tombstone still wins.
func TestCancelledRowReadAfterItsTimeNeverLeaves(t *testing.T) {
	cfg, pg, db := config(t)
	conn := pg.Conn(t, db)
	ctx := context.Background()
	first, stop, exited := start(t, cfg) // creates the slot and the exchange
	eventually(t, "streaming", func() bool { return first.Stats().Streaming.Load() })
	got := consume(t, testenv.SharedRabbit(t).URL(), cfg.Brokers.Configs()[0].Exchange)
	stop()
	if err := waitResult(t, exited); err != nil {
		t.Fatal(err)
	}
	msg := func(deliverAt time.Time) outbox.Message {
		id, _ := uuid.NewV7()
		return outbox.Message{ID: id, AggregateType: "order", AggregateID: "1", EventType: "order.reminder",
			Payload: []byte(`{}`), DeliverAt: deliverAt}
	}
	due := dbNow(t, conn).Add(time.Second)
	cancelled, kept, after := msg(due), msg(due), msg(time.Time{})
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return outbox.Write(ctx, tx, cancelled, kept) }); err != nil {
		t.Fatal(err)
	}
	var ok bool
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) (err error) { ok, err = outbox.Cancel(ctx, tx, cancelled.ID); return err })
	if err != nil || !ok {
		t.Fatalf("Cancel before due: %v, %v; want true", ok, err)
	}
	for !dbNow(t, conn).After(due) {
		time.Sleep(100 * time.Millisecond)
	}
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return outbox.Write(ctx, tx, after) }); err != nil {
		t.Fatal(err)
	}
	start(t, cfg)
	for _, m := range []outbox.Message{kept, after} {
		eventually(t, "message "+m.ID.String(), func() bool { _, n := got.get(m.ID.String()); return n > 0 })
	}
	neverArrives(t, conn, got, cancelled.ID.String())
}

// neverArrives checks that the message id did not arrive, once the schedule is empty and a second
// more passed.
func neverArrives(t *testing.T, conn *pgx.Conn, got *arrivals, id string) {
	t.Helper()
	eventually(t, "the schedule empty", func() bool {
		var n int
		return conn.QueryRow(context.Background(), "SELECT pg_catalog.count(*) FROM walbox_schedule").Scan(&n) == nil && n == 0
	})
	time.Sleep(time.Second)
	if _, n := got.get(id); n != 0 {
		t.Errorf("the cancelled message arrived %d times", n)
	}
}
