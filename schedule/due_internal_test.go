package schedule

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/wire"
)

// Many messages due at one instant are read a batch at a time, in order, without sorting them all.
// A sort at each batch made the sender several times slower than the relay (docs/bench/schedule.md).
func TestDueMessagesAreReadInOrderWithoutASort(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	_, conn := dueAtOnce(t, 20000)
	var plan string
	if err := conn.QueryRow(context.Background(), "EXPLAIN (FORMAT JSON) "+tablesIn("public").dueSQL(), "s", DefaultBatch, cancelLockClass).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plan, "Sort") {
		t.Errorf("the sender sorts every due message at each batch:\n%s", plan)
	}
}

// The messages of a batch go out in deliver_at order whatever order the rows arrive in.
func TestDueMessagesOfABatchAreInDeliverAtOrder(t *testing.T) {
	_, _, conn := migratedDB(t)
	rows, err := conn.Query(context.Background(), "SELECT '', '(0,1)'::tid, g::text, pg_catalog.now() OPERATOR(pg_catalog.+) g * interval '1 second',"+
		" pg_catalog.gen_random_uuid(), 'order', '1', 'order.reminder', '{}'::jsonb, '{}', NULL::timestamptz, '', '', '',"+
		" NULL::timestamptz, interval '0', false FROM pg_catalog.generate_series(5, 1, -1) g")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := readDue(rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 5 {
		t.Fatalf("read %d messages, want 5", len(ds))
	}
	for i := 1; i < len(ds); i++ {
		if ds[i].msg.DeliverAt.Before(ds[i-1].msg.DeliverAt) {
			t.Errorf("message %d of the batch is due at %v, before message %d at %v: want deliver_at order",
				i, ds[i].msg.DeliverAt, i-1, ds[i-1].msg.DeliverAt)
		}
	}
}

// dueAtOnce returns a migrated database whose slot s has n messages due at one instant, and a
// connection to it.
func dueAtOnce(tb testing.TB, n int) (string, *pgx.Conn) {
	pg := testenv.SharedPostgres(tb)
	db, conn := pg.MigratedDatabase(tb, migrations.Config{})
	pg.Exec(tb, db, `INSERT INTO walbox_schedule (slot_name, message_id, deliver_at, id, aggregate_type, aggregate_id,
		event_type, payload, headers, amqp_id, routing_key, exchange)
		SELECT 's', u::text, pg_catalog.now(), u, 'order', '1', 'order.reminder', '{}', '{}', '', '', ''
		FROM (SELECT pg_catalog.gen_random_uuid() AS u FROM pg_catalog.generate_series(1, $1::int)) g`, n)
	pg.Exec(tb, db, "VACUUM ANALYZE walbox_schedule")
	return db, conn
}

// confirming is a session that confirms each message as it is published. Its confirms wait until
// read, so a batch never blocks its own publish.
type confirming struct {
	seq      uint64
	confirms chan wire.Confirm
}

func (p *confirming) Publish(context.Context, *wire.Message) (uint64, error) {
	p.seq++
	p.confirms <- wire.Confirm{Seq: p.seq}
	return p.seq, nil
}
func (p *confirming) Park(ctx context.Context, pk *wire.Parked) (uint64, error) {
	return p.Publish(ctx, &pk.Message)
}
func (p *confirming) Confirms() <-chan wire.Confirm { return p.confirms }
func (p *confirming) Close() error                  { return nil }

// The sender without a broker's cost: b.N messages due at once, sent to a session that confirms
// at once. It measures the database's part of a burst (docs/bench/schedule.md). Run it with
// -benchtime 20000x.
func BenchmarkSenderBurst(b *testing.B) {
	if testenv.Short() {
		b.Skip("integration benchmark: needs PostgreSQL")
	}
	db, conn := dueAtOnce(b, b.N)
	s := NewSender(SenderConfig{DatabaseURL: db, Schema: "public", Slot: "s", Active: func() bool { return true },
		Dial: func(context.Context) (wire.Publisher, error) {
			return &confirming{confirms: make(chan wire.Confirm, pipeline*DefaultBatch)}, nil
		}})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.ResetTimer()
	start := time.Now()
	go func() { defer close(done); _ = s.Run(ctx) }()
	for s.Sent.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
	stop()
	<-done
	var left int
	if err := conn.QueryRow(context.Background(), "SELECT pg_catalog.count(*) FROM walbox_schedule").Scan(&left); err != nil || left != 0 {
		b.Fatalf("%d messages left in the schedule (%v)", left, err)
	}
}

// A sent message is noted in one row, under the empty slot name, naming each slot whose record was
// sent. Two slots' records of one id in one batch, and an id another slot sent before, add to it.
// A replay of a slot's sent message is not recorded again; another slot's record of it is.
func TestASentMessageIsNotedOnceNamingItsSlots(t *testing.T) {
	pg, db, conn := migratedDB(t)
	x, y, z, old, fresh := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	// "retired" is no relay's slot: its rows are any relay's to send.
	pg.Exec(t, db, `INSERT INTO walbox_schedule (slot_name, message_id, deliver_at, id, aggregate_type, aggregate_id,
		event_type, payload, headers, amqp_id, routing_key, exchange)
		SELECT k.slot, k.id, pg_catalog.now(), k.id::uuid, 'order', '1', 'order.reminder', '{}', '{}', '', '', ''
		FROM (VALUES ('s', $1), ('retired', $1), ('s', $2), ('s', $3)) AS k(slot, id)`, x, y, z)
	pg.Exec(t, db, `INSERT INTO walbox_schedule_done (message_id, slot_name, state, sent_by) VALUES ($1, '', 'sent', '{other}')`, z)
	pg.Exec(t, db, `INSERT INTO walbox_schedule_done (message_id, slot_name, state) VALUES ($1, 's', 'sent'), ($1, '', 'sent')`, old)

	s := NewSender(SenderConfig{DatabaseURL: db, Schema: "public", Slot: "s", Active: func() bool { return true },
		Dial: func(context.Context) (wire.Publisher, error) {
			return &confirming{confirms: make(chan wire.Confirm, DefaultBatch)}, nil
		}})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	for deadline := time.Now().Add(time.Minute); s.Sent.Load() < 4; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			stop()
			<-done
			t.Fatalf("sent %d of 4 due messages within a minute", s.Sent.Load())
		}
	}
	stop()
	<-done

	want := map[string]string{x: "{retired,s}", y: "{s}", z: "{other,s}", old: ""}
	rows, err := conn.Query(context.Background(), `SELECT message_id, slot_name, state,
		COALESCE((SELECT pg_catalog.array_agg(b ORDER BY b)::text FROM pg_catalog.unnest(sent_by) b), '')
		FROM walbox_schedule_done ORDER BY message_id, slot_name`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	n := 0
	for rows.Next() {
		var id, slot, state, by string
		if err := rows.Scan(&id, &slot, &state, &by); err != nil {
			t.Fatal(err)
		}
		if id == old {
			continue // written as before migration 018: a row under its slot, and one under ''
		}
		n++
		if slot != "" || state != "sent" {
			t.Errorf("message %s noted under slot %q as %s; want one row under '' as sent", id, slot, state)
		}
		got[id] = by
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("%d done rows for 3 sent messages; want one each", n)
	}
	for _, id := range []string{x, y, z} {
		if got[id] != want[id] {
			t.Errorf("message %s sent by %q; want %q", id, got[id], want[id])
		}
	}

	// Replays: slot s records again what it sent, and one message it never saw.
	record := func(slot string, ids ...string) {
		t.Helper()
		var b batch
		for _, id := range ids {
			if err := b.add(&wire.Message{ID: uuid.MustParse(id), DeliverAt: time.Now().Add(time.Hour), AggregateType: "order",
				AggregateID: "1", EventType: "order.reminder", Payload: []byte("{}")}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := conn.Exec(context.Background(), tablesIn("public").recordSQL(true), b.args(slot)...); err != nil {
			t.Fatal(err)
		}
	}
	record("s", x, y, z, old, fresh)
	record("third", x)
	var recorded []string
	if err := conn.QueryRow(context.Background(), "SELECT pg_catalog.array_agg(slot_name || ':' || message_id ORDER BY slot_name, message_id) FROM walbox_schedule").
		Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	wantRecorded := []string{"s:" + fresh, "third:" + x}
	slices.Sort(wantRecorded)
	if !slices.Equal(recorded, wantRecorded) {
		t.Errorf("recorded %v after the replays; want %v: only what slot s never sent, and slot third's record", recorded, wantRecorded)
	}
}

// Two relays whose slots hold the same ids note them at once. Each notes its ids in one order, by
// id, whatever its batch. In the order of a hash table, which differs between batches, each could
// hold a row the other waits for: a deadlock, and both batches sent again.
func TestSentMessagesAreNotedInTheOrderOfTheirIDs(t *testing.T) {
	_, _, conn := migratedDB(t)
	var slots, ids []string
	for i := range 40 {
		slots, ids = append(slots, "s"), append(ids, fmt.Sprintf("m%02d", i))
	}
	if _, err := conn.Exec(context.Background(), tablesIn("public").noteSQL(), slots, ids); err != nil {
		t.Fatal(err)
	}
	var noted []string
	// A row's place tells when the statement wrote it: the table was empty.
	if err := conn.QueryRow(context.Background(), "SELECT pg_catalog.array_agg(message_id ORDER BY ctid) FROM walbox_schedule_done").Scan(&noted); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(noted, ids) {
		t.Errorf("noted the sent ids in the order %v; want the order of the ids", noted)
	}
}

// A slot sends an id another slot sent days ago. The note is kept a week from this sending too: a
// replay of this slot's record within that week is not recorded, nor sent, again.
func TestASecondSlotsSendingIsKeptAWeek(t *testing.T) {
	pg, db, conn := migratedDB(t)
	pg.Exec(t, db, `INSERT INTO walbox_schedule_done (message_id, slot_name, state, sent_by, done_at)
		VALUES ('m', '', 'sent', '{other}', pg_catalog.now() - interval '6 days')`)
	if _, err := conn.Exec(context.Background(), tablesIn("public").noteSQL(), []string{"s"}, []string{"m"}); err != nil {
		t.Fatal(err)
	}
	var kept bool
	if err := conn.QueryRow(context.Background(), "SELECT done_at > pg_catalog.now() - interval '1 hour' FROM walbox_schedule_done WHERE message_id = 'm'").
		Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if !kept {
		t.Error("slot s sent m now, yet its note goes at the prune in a day: want a week")
	}
}

// The hourly prune reads the done rows it deletes, not the whole table. After weeks of prunes, new
// notes fill the space old ones left: rows of every age share the table's pages. The prune finds
// its rows through an index on done_at all the same.
func TestThePruneReadsOnlyTheRowsItDeletes(t *testing.T) {
	pg, db, conn := migratedDB(t)
	prune := tablesIn("public").pruneSQL()
	ctx := t.Context()
	day := 24 * time.Hour
	// 16 days of notes, a day at a time, each day's prune after them, then a vacuum, as autovacuum would.
	for d := range 16 {
		pg.Exec(t, db, `INSERT INTO walbox_schedule_done (message_id, slot_name, state, sent_by, done_at)
			SELECT pg_catalog.gen_random_uuid()::text, '', 'sent', '{s}', pg_catalog.now() - pg_catalog.make_interval(days => $1::int) + g * interval '1 ms'
			FROM pg_catalog.generate_series(1, 20000) g`, 16-d)
		// The prune of that day: of the notes a week older than it.
		if _, err := conn.Exec(ctx, prune, (DoneRetention + time.Duration(16-d)*day).Seconds()); err != nil {
			t.Fatal(err)
		}
		pg.Exec(t, db, "VACUUM ANALYZE walbox_schedule_done")
	}
	// Today's prune deletes a day of notes, an eighth of the table.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // the prune is only measured
	var plan []map[string]any
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+prune, DoneRetention.Seconds()).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var pages float64
	if err := tx.QueryRow(ctx, "SELECT pg_catalog.pg_relation_size('walbox_schedule_done') / 8192").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	read := doneBlocks(plan[0]["Plan"].(map[string]any))
	t.Logf("the prune read %v blocks of walbox_schedule_done, of %v", read, pages)
	if read > pages/3 {
		t.Errorf("the prune read %v blocks of walbox_schedule_done's %v to delete an eighth of its rows", read, pages)
	}
}

// doneBlocks sums the blocks the scans of walbox_schedule_done in plan read, from cache or not.
func doneBlocks(plan map[string]any) float64 {
	n := 0.0
	if plan["Relation Name"] == "walbox_schedule_done" && plan["Node Type"] != "ModifyTable" {
		n += plan["Shared Hit Blocks"].(float64) + plan["Shared Read Blocks"].(float64)
	}
	subs, _ := plan["Plans"].([]any)
	for _, p := range subs {
		n += doneBlocks(p.(map[string]any))
	}
	return n
}

// migratedDB returns the shared PostgreSQL, a migrated database on it, and a connection to that
// database. It skips the test in -short mode.
func migratedDB(t *testing.T) (*testenv.Postgres, string, *pgx.Conn) {
	t.Helper()
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db, conn := pg.MigratedDatabase(t, migrations.Config{})
	return pg, db, conn
}
