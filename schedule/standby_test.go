package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/schedule"
	"github.com/walbox/walbox/wire"
)

// A PostgreSQL 17 primary with synchronized_standby_slots, and its standby. The standby's WAL
// receiver is paused, then a scheduled message is recorded and the primary fails over. A confirm
// moves the relay's failover slot past the row, and the standby's synced copy follows it. So a
// confirmed record must be on the promoted standby; else the message is lost.
func TestAConfirmedRecordSurvivesAFailover(t *testing.T) {
	primary, standby, db, conn := standbyPair(t)
	standbyDB := onPort(t, db, standby.Port())
	caughtUp(t, conn, standby)

	ctx := context.Background()
	rec, err := schedule.Wrap(ctx, &instant{confirms: make(chan wire.Confirm, 16)}, db, "public", "s", 16, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Close() })
	receiver := standby.PauseReceiver(t)

	id := uuid.New()
	m := &wire.Message{ID: id, EventType: "order.reminder", Payload: []byte(`{}`), DeliverAt: time.Now().Add(time.Hour)}
	if _, err := rec.(*schedule.Recorder).Schedule(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := rec.(*schedule.Recorder).Flush(); err != nil {
		t.Fatal(err)
	}
	// A confirm comes now, or (waiting for the standby) once the primary is gone.
	var verdict *wire.Confirm
	select {
	case c := <-rec.Confirms():
		verdict = &c
	case <-time.After(3 * time.Second):
	}
	primary.Stop(t, "immediate")
	if verdict == nil {
		select {
		case c := <-rec.Confirms():
			verdict = &c
		case <-time.After(time.Minute):
			t.Fatal("no verdict a minute after the primary stopped")
		}
	}
	// The receiver dies with what it did not read; the standby restarts from its own WAL.
	if err := syscall.Kill(receiver, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitReady(t, standby)
	standby.Promote(t)
	var n int
	if err := queryRow(standbyDB, "SELECT pg_catalog.count(*) FROM public.walbox_schedule WHERE message_id OPERATOR(pg_catalog.=) $1", &n, m.AMQPMessageID()); err != nil {
		t.Fatal(err)
	}
	switch {
	case verdict.Err == nil && n == 0:
		t.Fatalf("record %s confirmed (seq %d) but not on the promoted standby: the message is lost", m.AMQPMessageID(), verdict.Seq)
	case verdict.Err != nil && !errors.Is(verdict.Err, wire.ErrNotRecorded):
		t.Fatalf("verdict %v, want one of %v", verdict.Err, wire.ErrNotRecorded)
	}
	t.Logf("verdict: seq %d, %v; on the promoted standby: %d", verdict.Seq, verdict.Err, n)
}

// The same servers, no failover. A record is confirmed once the standby flushed it. With the
// standby's receiver paused, the wait ends the session after its bound, naming the standby's slot.
// The Recorder's role has no REPLICATION and no other grant than on the schedule's tables.
func TestARecordWaitsForTheSynchronizedStandby(t *testing.T) {
	primary, standby, db, conn := standbyPair(t)
	primary.Exec(t, db, "CREATE ROLE scheduler LOGIN NOREPLICATION")
	primary.Exec(t, db, "GRANT SELECT, INSERT ON public.walbox_schedule, public.walbox_schedule_done TO scheduler")
	caughtUp(t, conn, standby)
	t.Cleanup(schedule.SetStandbyWait(2 * time.Second))
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User("scheduler")
	db = u.String()

	if c := recordOne(t, db); c.Err != nil || c.Seq != 1 {
		t.Fatalf("standby streaming: verdict seq %d, %v; want 1 confirmed", c.Seq, c.Err)
	}
	standby.PauseReceiver(t)
	c := recordOne(t, db)
	if c.Err == nil || !errors.Is(c.Err, wire.ErrNotRecorded) || !errors.Is(c.Err, wire.ErrSessionClosed) ||
		!strings.Contains(c.Err.Error(), "standby1 (flushed up to") {
		t.Fatalf("receiver paused: verdict seq %d, %v; want the session's end naming standby1", c.Seq, c.Err)
	}
	t.Log(c.Err)
}

// recordOne records a message due in an hour for slot s over db, and returns its verdict.
func recordOne(t *testing.T, db string) wire.Confirm {
	t.Helper()
	return recordAs(t, db, "s", &wire.Message{ID: uuid.New(), EventType: "order.reminder", Payload: []byte(`{}`), DeliverAt: time.Now().Add(time.Hour)})
}

// recordAs records m as slot's relay does, and returns its verdict.
func recordAs(t *testing.T, db, slot string, m *wire.Message) wire.Confirm {
	t.Helper()
	ctx := context.Background()
	p, err := schedule.Wrap(ctx, &instant{confirms: make(chan wire.Confirm, 16)}, db, "public", slot, 16, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rec := p.(*schedule.Recorder)
	if _, err := rec.Schedule(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-rec.Confirms():
		return c
	case <-time.After(time.Minute):
		t.Fatal("no verdict after a minute")
	}
	return wire.Confirm{}
}

// A slot that is not a failover slot is not synced, and PostgreSQL does not hold it back for
// synchronized_standby_slots. So its records do not wait: a paused standby must not stall the relay.
func TestARecordOfASlotNotForFailoverDoesNotWait(t *testing.T) {
	_, standby, db, conn := standbyPair(t)
	if _, err := conn.Exec(context.Background(), "SELECT pg_catalog.pg_drop_replication_slot('s')"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(context.Background(), "SELECT pg_catalog.pg_create_logical_replication_slot('s', 'pgoutput', false, false, false)"); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, conn, standby)
	t.Cleanup(schedule.SetStandbyWait(2 * time.Second))
	standby.PauseReceiver(t)
	began := time.Now()
	if c := recordOne(t, db); c.Err != nil || c.Seq != 1 {
		t.Fatalf("slot not for failover, receiver paused: verdict seq %d, %v after %v; want 1 confirmed at once", c.Seq, c.Err, time.Since(began))
	}
}

// PostgreSQL folds an unquoted name of synchronized_standby_slots to lower case, as an identifier:
// 'Standby1' names the slot standby1. A record looked for a slot Standby1, found none, and waited.
func TestARecordWaitsForASlotNamedInCapitals(t *testing.T) {
	primary, standby, db, conn := standbyPair(t)
	primary.Exec(t, primary.URL(), `ALTER SYSTEM SET synchronized_standby_slots = ' Standby1 , "standby1"'`)
	primary.Exec(t, primary.URL(), "SELECT pg_catalog.pg_reload_conf()")
	deadline := time.Now().Add(10 * time.Second)
	for {
		var list string
		if err := conn.QueryRow(context.Background(), "SELECT pg_catalog.current_setting('synchronized_standby_slots')").Scan(&list); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(list, "Standby1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("synchronized_standby_slots is still %q", list)
		}
		time.Sleep(20 * time.Millisecond)
	}
	caughtUp(t, conn, standby)
	t.Cleanup(schedule.SetStandbyWait(2 * time.Second))
	if c := recordOne(t, db); c.Err != nil || c.Seq != 1 {
		t.Fatalf("standby streaming: verdict seq %d, %v; want 1 confirmed", c.Seq, c.Err)
	}
	standby.PauseReceiver(t)
	if c := recordOne(t, db); c.Err == nil || !strings.Contains(c.Err.Error(), "standby1 (flushed up to") {
		t.Fatalf("receiver paused: verdict seq %d, %v; want the session's end naming standby1", c.Seq, c.Err)
	}
}

// standbyPair starts a PostgreSQL 17 primary whose synchronized_standby_slots names its standby's
// slot. It returns both, and a migrated database on the primary with a connection to it. The
// database has a failover slot s, as walbox creates on PostgreSQL 17.
func standbyPair(t *testing.T) (primary, standby *testenv.Postgres, db string, conn *pgx.Conn) {
	t.Helper()
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL 17")
	}
	primary, standby = testenv.StartFailoverPair(t, testenv.WithSetting("hot_standby_feedback", "on"))
	db, conn = primary.MigratedDatabase(t, migrations.Config{})
	if _, err := conn.Exec(context.Background(), "SELECT pg_catalog.pg_create_logical_replication_slot('s', 'pgoutput', false, false, true)"); err != nil {
		t.Fatal(err)
	}
	return primary, standby, db, conn
}

// onPort returns db's URL on another server of this machine.
func onPort(t *testing.T, db string, port int) string {
	t.Helper()
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = fmt.Sprintf("%s:%d", u.Hostname(), port)
	return u.String()
}

// caughtUp waits until standby has replayed everything conn's server wrote so far.
func caughtUp(t *testing.T, conn *pgx.Conn, standby *testenv.Postgres) {
	t.Helper()
	var at string
	if err := conn.QueryRow(context.Background(), "SELECT pg_catalog.pg_current_wal_flush_lsn()::pg_catalog.text").Scan(&at); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var ok bool
		err := queryRow(standby.URL(), "SELECT pg_catalog.pg_last_wal_replay_lsn() OPERATOR(pg_catalog.>=) $1::pg_catalog.pg_lsn", &ok, at)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby has not replayed %s after a minute (%v)", at, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitReady waits until standby accepts connections again, after its restart.
func waitReady(t *testing.T, standby *testenv.Postgres) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var one int
		err := queryRow(standby.URL(), "SELECT 1", &one)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby is not back after a minute: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func queryRow(db, sql string, dest any, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql, args...).Scan(dest)
}
