package faults_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/testenv"
)

// A PostgreSQL 17 primary with synchronized_standby_slots fails over to its standby. The standby
// has a scheduled row, but its WAL receiver paused before the row's record in walbox_schedule.
// The test synchronises the failover slot itself, after walbox had its chance to confirm the row.
// A promoted slot past the row must come with the row's record; else the message is lost.
func TestScheduledRowSurvivesAFailoverBeforeItsRecordReachedTheStandby(t *testing.T) {
	heavy(t)
	primary, standby := testenv.StartFailoverPair(t,
		testenv.WithSetting("sync_replication_slots", "on"), testenv.WithSetting("hot_standby_feedback", "on"))
	w := newWorld(t, primary, testenv.SharedRabbit(t))
	standbyDB := withHost(t, w.db, hostOf(t, standby.URL()))
	r := w.startRelay()
	r.waitState("streaming", time.Minute)

	// Once the relay moved the slot, the standby's copy is usable. Then the test takes over its
	// synchronisation: the worker stops, and pg_sync_replication_slots() runs when the test says.
	waitFor(t, 2*time.Minute, "the slot synchronised to the standby", func() bool {
		w.pg.Exec(t, w.db, "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'order.placed', '{}')")
		w.pg.Exec(t, w.db, "SELECT pg_catalog.pg_log_standby_snapshot()")
		var ok bool
		return execRow(t, standbyDB, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_name OPERATOR(pg_catalog.=) $1 AND synced AND NOT temporary)", &ok, w.slot) == nil && ok
	})
	standby.Exec(t, standby.URL(), "ALTER SYSTEM SET sync_replication_slots = off")
	standby.Exec(t, standby.URL(), "SELECT pg_catalog.pg_reload_conf()")
	waitFor(t, time.Minute, "the slot sync worker to stop", func() bool {
		var n int
		return execRow(t, standby.URL(), "SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity WHERE backend_type OPERATOR(pg_catalog.=) 'slotsync worker'", &n) == nil && n == 0
	})

	// The relay stops reading; the row commits, the standby and then the relay's walsender have it.
	r.Signal(syscall.SIGSTOP)
	var before, id string
	if err := w.conn.QueryRow(context.Background(), "SELECT pg_catalog.pg_current_wal_insert_lsn()::pg_catalog.text").Scan(&before); err != nil {
		t.Fatal(err)
	}
	err := w.conn.QueryRow(context.Background(), "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, deliver_at)"+
		" VALUES ('order', '2', 'order.reminder', '{}', pg_catalog.clock_timestamp() + interval '1 hour') RETURNING id::text").Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the walsender to send the row", func() bool {
		var ok bool
		return execRow(t, w.db, "SELECT pg_catalog.count(*) OPERATOR(pg_catalog.=) 1 FROM pg_catalog.pg_stat_replication r"+
			" JOIN pg_catalog.pg_replication_slots s ON s.active_pid OPERATOR(pg_catalog.=) r.pid"+
			" WHERE s.slot_name OPERATOR(pg_catalog.=) $1 AND r.sent_lsn OPERATOR(pg_catalog.>) $2::pg_catalog.pg_lsn", &ok, w.slot, before) == nil && ok
	})
	receiver := standby.PauseReceiver(t)
	r.Signal(syscall.SIGCONT)

	// walbox records the row; a confirm would move the slot past it.
	past := func(db string) bool {
		var ok bool
		return execRow(t, db, "SELECT confirmed_flush_lsn OPERATOR(pg_catalog.>) $2::pg_catalog.pg_lsn FROM pg_catalog.pg_replication_slots"+
			" WHERE slot_name OPERATOR(pg_catalog.=) $1", &ok, w.slot, before) == nil && ok
	}
	deadline := time.Now().Add(10 * time.Second)
	for !past(w.db) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	var recorded int
	if err := execRow(t, w.db, "SELECT pg_catalog.count(*) FROM public.walbox_schedule WHERE id OPERATOR(pg_catalog.=) $1::pg_catalog.uuid", &recorded, id); err != nil || recorded != 1 {
		t.Fatalf("the relay has not recorded row %s on the primary (%d, %v): the test proved nothing\n%s", id, recorded, err, r.Output())
	}
	if err := execOn(standbyDB, "SELECT pg_catalog.pg_sync_replication_slots()"); err != nil {
		t.Fatalf("synchronise the slot: %v", err)
	}
	r.Kill()
	primary.Stop(t, "immediate")
	// The receiver dies with what it did not read; the standby restarts from its own WAL.
	if err := syscall.Kill(receiver, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the standby back", func() bool { return execOn(standby.URL(), "SELECT 1") == nil })
	standby.Promote(t)

	var rows, records int
	if err := execRow(t, standbyDB, "SELECT pg_catalog.count(*) FROM public.outbox WHERE id OPERATOR(pg_catalog.=) $1::pg_catalog.uuid", &rows, id); err != nil {
		t.Fatal(err)
	}
	if err := execRow(t, standbyDB, "SELECT pg_catalog.count(*) FROM public.walbox_schedule WHERE id OPERATOR(pg_catalog.=) $1::pg_catalog.uuid", &records, id); err != nil {
		t.Fatal(err)
	}
	slotPast := past(standbyDB)
	t.Logf("on the promoted standby: row %d, record %d, slot past the row %v", rows, records, slotPast)
	if rows != 1 {
		t.Fatalf("the promoted standby has %d rows %s, want 1: the test proved nothing", rows, id)
	}
	if slotPast && records == 0 {
		t.Fatalf("the promoted standby's slot is past row %s, which it has not recorded: the message is lost\n%s", id, r.Output())
	}
}

// execOn runs sql once on db.
func execOn(db, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}
