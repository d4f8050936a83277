package faults_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// Operational edges: routine operations around a running relay that used to make it skip
// committed rows silently. Each must stop walbox loudly (a non-zero exit naming the cause) and
// leave the slot short of every row walbox did not deliver.

// A slot dropped and recreated behind walbox's back, while walbox is retrying, starts from a later
// position: the rows committed in between are in no slot. walbox must refuse the new slot (it is
// ahead of the position recorded in the database), this process and the next one alike, and must
// not confirm anything on it.
func TestSlotReplacedWhileRetrying(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	_, cw, r := w.streaming(43)

	r.Signal(syscall.SIGSTOP)
	w.dropSlot()
	if err := cw.Tx(t.Context(), 10); err != nil { // the gap: in no slot
		t.Fatal(err)
	}
	w.exec("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", w.slot)
	created := w.confirmedLSN()
	r.Signal(syscall.SIGCONT)

	for i, rr := range []*relay{r, w.startRelay()} { // the same process retrying, then a restart
		code := rr.Wait(time.Minute)
		out := rr.Output()
		if code == 0 || !strings.Contains(out, "ahead of") || !strings.Contains(out, "walbox recover") {
			t.Fatalf("relay %d exited %d on a replaced slot; want non-zero and an error naming the gap:\n%s", i, code, testenv.Tail(out, 20))
		}
	}
	if got := w.confirmedLSN(); got != created {
		t.Errorf("walbox moved the replaced slot from %s to %s", created, got)
	}
}

// A migration swaps a new table in by renames: the publication still names the old table (by
// OID), so nothing written to the new one is decoded, and keepalives carry positions past it.
func TestTableSwapStops(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	_, cw, r := w.streaming(44)

	w.exec("CREATE TABLE outbox_new (LIKE outbox INCLUDING ALL)")
	w.exec("ALTER TABLE outbox RENAME TO outbox_old")
	w.exec("ALTER TABLE outbox_new RENAME TO outbox")
	before := w.walLSN()
	if err := cw.Tx(t.Context(), 10); err != nil {
		t.Fatal(err)
	}
	w.expectStop(r, before, "does not contain table public.outbox", "public.outbox_old")
}

// The publication is changed under the relay: it no longer publishes inserts, no longer contains
// the table, or is gone.
func TestPublicationChangeStops(t *testing.T) {
	heavy(t)
	pg, rabbit := testenv.SharedPostgres(t), testenv.SharedRabbit(t)
	for _, tc := range []struct {
		name, sql, want string
	}{
		{"publish set to update", "ALTER PUBLICATION walbox SET (publish = 'update')", "does not publish inserts"},
		{"table dropped from the publication", "ALTER PUBLICATION walbox DROP TABLE outbox", "does not contain table public.outbox"},
		{"publication dropped", "DROP PUBLICATION walbox", "publication"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, pg, rabbit)
			_, cw, r := w.streaming(45)
			w.exec(tc.sql)
			before := w.walLSN()
			if err := cw.Tx(t.Context(), 10); err != nil {
				t.Fatal(err)
			}
			w.expectStop(r, before, tc.want)
		})
	}
}

// A column the mapping needs is renamed or dropped mid-stream: that is a configuration error
// naming the column, as it is at start, not a bad row parked for every insert that follows.
func TestColumnDriftStops(t *testing.T) {
	heavy(t)
	pg, rabbit := testenv.SharedPostgres(t), testenv.SharedRabbit(t)
	for _, tc := range []struct {
		name, alter, insert, want string
	}{
		{"event_type renamed", "ALTER TABLE outbox RENAME COLUMN event_type TO kind",
			`INSERT INTO outbox (aggregate_type, aggregate_id, kind, payload) VALUES ('order', '1', 'order.created', '{}')`,
			`no column "event_type"`},
		{"payload dropped", "ALTER TABLE outbox DROP COLUMN payload",
			`INSERT INTO outbox (aggregate_type, aggregate_id, event_type) VALUES ('order', '1', 'order.created')`,
			`no column "payload"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, pg, rabbit)
			_, _, r := w.streaming(46)
			w.exec(tc.alter)
			before := w.walLSN()
			for range 3 {
				w.exec(tc.insert)
			}
			w.expectStop(r, before, tc.want)
			if strings.Contains(r.Output(), "parked") {
				t.Errorf("rows were parked instead of walbox stopping:\n%s", testenv.Tail(r.Output(), 20))
			}
		})
	}
}

// streaming starts a verifier, a writer with seed and a relay, and has 20 rows delivered.
func (w *world) streaming(seed uint64) (*checker.Verifier, *checker.Writer, *relay) {
	w.t.Helper()
	v := w.startVerifier()
	cw := w.newWriter(checker.WriterConfig{Seed: seed})
	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	if err := cw.Tx(w.t.Context(), 20); err != nil {
		w.t.Fatal(err)
	}
	waitDelivered(w.t, v, 20, time.Minute)
	return v, cw, r
}

// expectStop waits for the relay to exit non-zero with an error containing every want, then
// checks that the slot did not pass before, the WAL position before the rows walbox could not
// deliver, and that a restarted relay (a supervisor's) stops too.
func (w *world) expectStop(r *relay, before pglogrepl.LSN, want ...string) {
	w.t.Helper()
	for i, rr := range []*relay{r, w.startRelay()} {
		code := rr.Wait(time.Minute)
		out := rr.Output()
		if code == 0 {
			w.t.Fatalf("relay %d exited 0; want a non-zero exit:\n%s", i, testenv.Tail(out, 20))
		}
		for _, s := range want {
			if !strings.Contains(out, s) {
				w.t.Fatalf("relay %d exited %d without an error containing %q:\n%s", i, code, s, testenv.Tail(out, 20))
			}
		}
	}
	if got := w.confirmedLSN(); got > before {
		w.t.Errorf("the slot moved to %s, past %s, where rows walbox did not deliver begin", got, before)
	}
	// Putting the cause right does not make the slot deliver those rows: the stop is recorded,
	// and walbox status reports it with the way out, as walbox doctor does (stops_test.go).
	if out, code := w.walbox(nil, "status"); code == 0 || !strings.Contains(out, "stopped") || !strings.Contains(out, wayOut) {
		w.t.Errorf("walbox status exited %d after the stop; want non-zero, the stop and %q:\n%s", code, wayOut, out)
	}
}

// exec runs sql in the world's database as the superuser.
func (w *world) exec(sql string, args ...any) {
	w.t.Helper()
	if _, err := w.conn.Exec(context.Background(), sql, args...); err != nil {
		w.t.Fatalf("%s: %v", sql, err)
	}
}

// confirmedLSN returns the slot's confirmed_flush_lsn.
func (w *world) confirmedLSN() pglogrepl.LSN {
	w.t.Helper()
	return w.lsn("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", w.slot)
}

// walLSN returns the server's current WAL insert position.
func (w *world) walLSN() pglogrepl.LSN {
	w.t.Helper()
	return w.lsn("SELECT pg_current_wal_insert_lsn()::text")
}

func (w *world) lsn(sql string, args ...any) pglogrepl.LSN {
	w.t.Helper()
	var s string
	if err := w.conn.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		w.t.Fatalf("%s: %v", sql, err)
	}
	l, err := pglogrepl.ParseLSN(s)
	if err != nil {
		w.t.Fatal(err)
	}
	return l
}
