package faults_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// walbox recover, end to end: a slot goes missing, lost or replaced while a writer keeps
// committing, walbox run refuses, `walbox recover` republishes the gap from the outbox table and
// replaces the slot while the writer still commits, and walbox run continues from the new slot.
// The checker's verdict over the whole run: nothing lost (duplicates allowed).

// The slot is dropped under a streaming relay while rows keep being committed (the gap), and the
// writer goes on committing while recover runs: rows committed before the new slot's consistent
// point must come from the table, rows after it from the new slot.
func TestRecoverDroppedSlot(t *testing.T) {
	heavy(t)
	recoverDroppedSlot(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
}

func recoverDroppedSlot(t *testing.T, pg *testenv.Postgres, rabbit *testenv.Rabbit) {
	w := newWorld(t, pg, rabbit)
	v, wr := w.streamingWriter(51)

	w.dropSlot()
	w.expectRefusal(w.relays[0], "will not recreate")
	w.recoverAndContinue(v, wr, "missing")
}

// A slot dropped and recreated behind walbox's back is ahead of the record: recover drops it and
// replaces it with one whose gap it covers.
func TestRecoverReplacedSlot(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	v, wr := w.streamingWriter(52)

	r := w.relays[0]
	r.Signal(syscall.SIGSTOP)
	w.dropSlot()
	time.Sleep(500 * time.Millisecond) // rows committed here are in no slot
	w.exec("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", w.slot)
	r.Signal(syscall.SIGCONT)
	w.expectRefusal(r, "ahead of")
	// walbox status agrees with walbox run.
	if out, code := w.walbox(nil, "status"); code == 0 || !strings.Contains(out, "ahead of") || !strings.Contains(out, "walbox recover") {
		t.Errorf("walbox status exited %d on a slot walbox run refuses; want non-zero, naming the gap and walbox recover:\n%s", code, out)
	}
	w.recoverAndContinue(v, wr, "ahead at")
}

// max_slot_wal_keep_size invalidates the slot while the relay is down and rows are committed:
// recover drops the lost slot and republishes what it lost.
func TestRecoverInvalidatedSlot(t *testing.T) {
	heavy(t)
	pg := testenv.StartPostgres(t, testenv.WithSetting("max_slot_wal_keep_size", "1MB"))
	testenv.RequireOwn(t, pg)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	v, wr := w.streamingWriter(53)

	w.relays[0].Kill()
	w.burnWAL()
	w.expectRefusal(w.startRelay(), "invalidated")
	w.recoverAndContinue(v, wr, "lost")
}

// streamingWriter starts a verifier, a relay and a writer that commits until the test stops it,
// and waits for 200 deliveries.
func (w *world) streamingWriter(seed uint64) (*checker.Verifier, *writer) {
	w.t.Helper()
	v := w.startVerifier()
	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	wr := w.startWriter(checker.WriterConfig{Seed: seed, MaxTx: 10, Pause: 10 * time.Millisecond})
	waitDelivered(w.t, v, 200, time.Minute)
	return v, wr
}

// expectRefusal waits for the relay to exit non-zero with an error containing want and naming
// walbox recover.
func (w *world) expectRefusal(r *relay, want string) {
	w.t.Helper()
	code := r.Wait(time.Minute)
	out := r.Output()
	if code == 0 || !strings.Contains(out, want) || !strings.Contains(out, "walbox recover") {
		w.t.Fatalf("walbox run exited %d; want non-zero and an error containing %q and naming walbox recover:\n%s", code, want, testenv.Tail(out, 20))
	}
}

var (
	wouldRepublish = regexp.MustCompile(`would republish (\d+) rows`)
	republished    = regexp.MustCompile(`republished (\d+) rows`)
)

// recoverAndContinue checks the gap is real, runs `walbox recover --dry-run` and `walbox recover`
// with the writer still committing, starts walbox run again, and gives the verdict.
func (w *world) recoverAndContinue(v *checker.Verifier, wr *writer, state string) {
	t := w.t
	t.Helper()
	time.Sleep(500 * time.Millisecond) // the gap grows
	gap := checker.Check(wr.Committed(), v.Deliveries()).Lost
	if gap == 0 {
		t.Fatal("no committed row is missing from the queue: there is no gap and the test proves nothing")
	}
	before := w.confirmedLSNOrZero()

	out, code := w.walbox(nil, "recover", "--dry-run")
	m := wouldRepublish.FindStringSubmatch(out)
	if code != 0 || m == nil || !strings.Contains(out, state) {
		t.Fatalf("walbox recover --dry-run exited %d; want 0, the slot %q and a count:\n%s", code, state, out)
	}
	if n, _ := strconv.Atoi(m[1]); n < gap {
		t.Fatalf("walbox recover --dry-run counts %d rows, fewer than the %d committed rows missing from the queue:\n%s", n, gap, out)
	}
	if got := w.confirmedLSNOrZero(); got != before {
		t.Fatalf("walbox recover --dry-run changed the slot: %s, was %s", got, before)
	}
	t.Logf("walbox recover --dry-run (gap: %d rows missing from the queue):\n%s", gap, out)

	committed := len(wr.Committed())
	start := time.Now()
	out, code = w.walbox(nil, "recover")
	took := time.Since(start)
	m = republished.FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("walbox recover exited %d:\n%s", code, out)
	}
	during := len(wr.Committed()) - committed
	if during == 0 {
		t.Fatal("the writer committed nothing while walbox recover ran: the test proves nothing about the cut")
	}
	t.Logf("walbox recover took %v, %d rows committed meanwhile:\n%s", took, during, out)

	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	w.progress(v, 200, time.Minute)
	wr.stop()
	rep := w.verdict(wr.Writer, v, 2*time.Minute, 1, 1,
		"gap_rows="+itoa(gap)+" recovered="+m[1]+" recover_ms="+itoa(int(took.Milliseconds()))+" committed_during_recover="+itoa(during))
	if rep.Lost != 0 {
		t.Errorf("lost %d rows over the whole run", rep.Lost)
	}
}

// confirmedLSNOrZero returns the slot's confirmed_flush_lsn as text, or "missing".
func (w *world) confirmedLSNOrZero() string {
	w.t.Helper()
	if exists, _, _ := w.slotInfo(); !exists {
		return "missing"
	}
	return w.confirmedLSN().String()
}

// The refusals and the edges of walbox recover, one after another on one database.
func TestRecoverRefusals(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	record := func() string {
		var s string
		if err := w.conn.QueryRow(context.Background(),
			"SELECT row(walbox_slots.*)::text FROM walbox_slots WHERE slot_name = $1", w.slot).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	expect := func(wantCode int, want string, env []string, args ...string) string {
		t.Helper()
		out, code := w.walbox(env, append([]string{"recover"}, args...)...)
		if (code == 0) != (wantCode == 0) || !strings.Contains(out, want) {
			t.Fatalf("walbox recover %v exited %d; want %d and %q:\n%s", args, code, wantCode, want, out)
		}
		return out
	}

	t.Run("a healthy slot: no gap, nothing changed", func(t *testing.T) {
		w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('a', '1', 'e', '{}')`)
		slot, rec := w.confirmedLSNOrZero(), record()
		expect(0, "no gap", nil)
		if w.confirmedLSNOrZero() != slot || record() != rec {
			t.Errorf("the slot or its record changed: %s %s, was %s %s", w.confirmedLSNOrZero(), record(), slot, rec)
		}
	})
	t.Run("forced on a healthy slot: for rows the publication did not cover", func(t *testing.T) {
		slot := w.confirmedLSNOrZero()
		expect(0, "replaced on request", nil, "--force")
		if w.confirmedLSNOrZero() == slot {
			t.Error("the slot was not replaced")
		}
		expect(0, "no gap", nil)
	})
	t.Run("recorded on another server: run, doctor, status and recover agree", func(t *testing.T) {
		w := w.in(t)
		w.exec("UPDATE walbox_slots SET system_identifier = '1' WHERE slot_name = $1", w.slot)
		w.expectRefusal(w.startRelay(), "system identifier 1")
		if out, code := w.walbox(nil, "doctor"); code == 0 || !strings.Contains(out, "system identifier 1") {
			t.Errorf("walbox doctor exited %d on a slot walbox run refuses; want a failure naming the other server:\n%s", code, out)
		}
		if out, code := w.walbox(nil, "status"); code == 0 || !strings.Contains(out, "system identifier 1") {
			t.Errorf("walbox status exited %d on a slot walbox run refuses; want non-zero, naming the other server:\n%s", code, out)
		}
		expect(1, "--all-rows", nil, "--dry-run")
		expect(0, "on another system", nil, "--dry-run", "--all-rows")
		expect(0, "republished", nil, "--all-rows")
		expect(0, "no gap", nil)
	})
	t.Run("no record: nothing to recover from", func(t *testing.T) {
		expect(1, "no record of slot", []string{"WALBOX_SLOT=never_recorded"})
	})

	w.dropSlot()
	t.Run("ids from positions cannot be recovered", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "walbox.yaml")
		if err := os.WriteFile(cfg, []byte("tables:\n  - table: public.outbox\n    message-id: position\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		expect(1, "commit positions", []string{"WALBOX_CONFIG=" + cfg})
		expect(1, "commit positions", []string{"WALBOX_CONFIG=" + cfg}, "--dry-run")
	})
	t.Run("no horizon recorded: every row, on request", func(t *testing.T) {
		w.exec("UPDATE walbox_slots SET confirmed_xmin = NULL WHERE slot_name = $1", w.slot)
		expect(1, "--all-rows", nil)
		expect(0, "republished 1 rows", nil, "--all-rows")
		if exists, _, _ := w.slotInfo(); !exists {
			t.Fatal("the slot was not recreated")
		}
		expect(0, "no gap", nil)
	})

	w.dropSlot()
	w.exec("DELETE FROM outbox")
	t.Run("delete after insert: the rows are gone", func(t *testing.T) {
		rec := record()
		out := expect(1, "DeleteAfterInsert", nil)
		if !strings.Contains(out, "--accept-loss") {
			t.Errorf("the refusal does not name --accept-loss:\n%s", out)
		}
		if exists, _, _ := w.slotInfo(); exists || record() != rec {
			t.Fatal("the refusal changed the slot or its record")
		}
		expect(0, "republished 0 rows", nil, "--accept-loss")
		r := w.startRelay()
		r.waitState("streaming", time.Minute)
	})
}

// walbox recover takes the broker settings of walbox run, a list of cluster nodes included: with
// the first node down, it republishes through the next, as walbox run would.
func TestRecoverUsesTheNextBrokerWhenTheFirstIsDown(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'order.paid', '{}')`)
	time.Sleep(500 * time.Millisecond)
	w.dropSlot()
	w.expectRefusal(r, "will not recreate")
	w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'order.shipped', '{}')`)

	list := "WALBOX_AMQP_URL=amqp://guest:s3cret@127.0.0.1:1/," + w.relayMQ
	out, code := w.walbox([]string{list}, "recover")
	if code != 0 || !republished.MatchString(out) {
		t.Fatalf("walbox recover with the first of two brokers down exited %d:\n%s", code, out)
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("walbox recover printed a password:\n%s", out)
	}
}

// The scenario of issue 34: walbox is stopped, 532 rows are committed, prune runs with a short
// age, more rows are committed and the slot is dropped. prune keeps the 532 rows (no slot
// confirmed them); a DELETE by hand takes them instead. recover must not call the gap filled: it
// exits non-zero naming the rows deleted, republishes what is left only with --accept-loss, and
// says so. Then the same for producers that delete rows as they insert them, beside rows kept.
// On the old code prune deleted the 532 rows and recover reported every row confirmed.
func TestRecoverRefusesAGapWhoseRowsWereDeleted(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	if code := r.Stop(time.Minute); code != 0 {
		t.Fatalf("walbox run exited %d on SIGTERM:\n%s", code, testenv.Tail(r.Output(), 20))
	}

	w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
		SELECT 'order', g::text, 'order.gone', '{}', now() - interval '1 minute' FROM generate_series(1, 532) g`)
	out, code := w.walbox(nil, "prune", "--older-than", "1s")
	if code != 0 || !strings.Contains(out, "deleted 0 rows") || !strings.Contains(out, "kept 532 rows") {
		t.Fatalf("walbox prune --older-than 1s exited %d; want 0, nothing deleted, the 532 rows no slot confirmed kept:\n%s", code, out)
	}
	w.exec(`DELETE FROM outbox WHERE event_type = 'order.gone'`)
	for i := range 20 {
		w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, 'order.after', '{}')`, itoa(i))
	}
	w.dropSlot()
	w.waitDeletes(532)

	refused := func(args ...string) {
		t.Helper()
		out, code := w.walbox(nil, append([]string{"recover"}, args...)...)
		if code == 0 || !strings.Contains(out, "532 rows deleted") || !strings.Contains(out, "--accept-loss") ||
			strings.Contains(out, "every one confirmed") {
			t.Fatalf("walbox recover %v exited %d; want non-zero, naming the 532 rows deleted and --accept-loss:\n%s", args, code, out)
		}
		if exists, _, _ := w.slotInfo(); exists {
			t.Fatalf("walbox recover %v created the slot although it refused:\n%s", args, out)
		}
	}
	refused("--dry-run")
	refused()
	out, code = w.walbox(nil, "recover", "--accept-loss")
	if code != 0 || !strings.Contains(out, "republished 20 rows") || strings.Contains(out, "every one confirmed") ||
		!strings.Contains(out, "are lost (--accept-loss)") {
		t.Fatalf("walbox recover --accept-loss exited %d; want 0, the 20 rows left republished, the loss named:\n%s", code, out)
	}
	if out, code := w.walbox(nil, "recover"); code != 0 || !strings.Contains(out, "no gap") {
		t.Fatalf("walbox recover after the accepted loss exited %d; want no gap:\n%s", code, out)
	}

	t.Run("delete after insert beside rows kept", func(t *testing.T) {
		w := w.in(t)
		r := w.startRelay()
		r.waitState("streaming", time.Minute)
		if code := r.Stop(time.Minute); code != 0 {
			t.Fatalf("walbox run exited %d on SIGTERM:\n%s", code, testenv.Tail(r.Output(), 20))
		}
		// One producer deletes its rows in the transaction that inserts them; another keeps them.
		w.inTx(func(tx pgx.Tx) {
			for _, sql := range []string{
				`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
					SELECT 'order', g::text, 'order.fleeting', '{}' FROM generate_series(1, 7) g`,
				`DELETE FROM outbox WHERE event_type = 'order.fleeting'`,
			} {
				if _, err := tx.Exec(context.Background(), sql); err != nil {
					t.Fatal(err)
				}
			}
		})
		w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'order.kept', '{}')`)
		w.dropSlot()
		w.waitDeletes(532 + 7)
		out, code := w.walbox(nil, "recover")
		if code == 0 || !strings.Contains(out, "7 rows deleted") || !strings.Contains(out, "DeleteAfterInsert") {
			t.Fatalf("walbox recover exited %d; want non-zero, naming the 7 rows deleted as they were inserted:\n%s", code, out)
		}
		out, code = w.walbox(nil, "recover", "--accept-loss")
		if code != 0 || !strings.Contains(out, "republished") || strings.Contains(out, "every one confirmed") {
			t.Fatalf("walbox recover --accept-loss exited %d:\n%s", code, out)
		}
		r = w.startRelay()
		r.waitState("streaming", time.Minute)
	})
}

// waitDeletes waits until the server's statistics count n rows deleted from the outbox table:
// the deleting session reports them within seconds.
func (w *world) waitDeletes(n int64) {
	w.t.Helper()
	waitFor(w.t, time.Minute, "the statistics to count the deletes", func() bool {
		var got int64
		err := w.conn.QueryRow(context.Background(), "SELECT pg_stat_get_tuples_deleted('public.outbox'::regclass)").Scan(&got)
		return err == nil && got >= n
	})
}

// TRUNCATE takes rows without the statistics counting them. walbox is stopped, 30 rows are
// committed, a TRUNCATE takes them, 5 more rows come and the slot is dropped. recover must not
// call the gap filled: on the old code it republished the 5 rows and said every one confirmed.
// --accept-loss republishes the 5 and names the loss. Before that, a GRANT in a gap, which
// writes the table's catalog row too, is no sign of loss: the table still has its first file.
func TestRecoverRefusesAGapATruncateEmptied(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	if code := r.Stop(time.Minute); code != 0 {
		t.Fatalf("walbox run exited %d on SIGTERM:\n%s", code, testenv.Tail(r.Output(), 20))
	}
	w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'order.kept', '{}')`)
	w.exec(`GRANT SELECT ON outbox TO PUBLIC`)
	w.dropSlot()
	if out, code := w.walbox(nil, "recover"); code != 0 || !strings.Contains(out, "every one confirmed") {
		t.Fatalf("walbox recover after a GRANT in the gap exited %d; want 0 and every one confirmed:\n%s", code, out)
	}
	r = w.startRelay()
	r.waitState("streaming", time.Minute)
	if code := r.Stop(time.Minute); code != 0 {
		t.Fatalf("walbox run exited %d on SIGTERM:\n%s", code, testenv.Tail(r.Output(), 20))
	}
	w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', g::text, 'order.truncated', '{}' FROM generate_series(1, 30) g`)
	w.exec(`TRUNCATE outbox`)
	for i := range 5 {
		w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, 'order.after', '{}')`, itoa(i))
	}
	w.dropSlot()
	for _, args := range [][]string{{"--dry-run"}, nil} {
		out, code := w.walbox(nil, append([]string{"recover"}, args...)...)
		if code == 0 || !strings.Contains(out, "TRUNCATE") || !strings.Contains(out, "--accept-loss") ||
			strings.Contains(out, "every one confirmed") {
			t.Fatalf("walbox recover %v exited %d; want non-zero, naming the TRUNCATE and --accept-loss:\n%s", args, code, out)
		}
		if exists, _, _ := w.slotInfo(); exists {
			t.Fatalf("walbox recover %v created the slot although it refused:\n%s", args, out)
		}
	}
	out, code := w.walbox(nil, "recover", "--accept-loss")
	if code != 0 || !strings.Contains(out, "republished 5 rows") || strings.Contains(out, "every one confirmed") {
		t.Fatalf("walbox recover --accept-loss exited %d; want 0, the 5 rows left republished, the loss named:\n%s", code, out)
	}
	if out, code := w.walbox(nil, "recover"); code != 0 || !strings.Contains(out, "no gap") {
		t.Fatalf("walbox recover after the accepted loss exited %d; want no gap:\n%s", code, out)
	}
}

// A crash drops the statistics' counts of deletes. walbox is stopped, 10 rows are committed and
// deleted by hand, the server crashes and restarts, 5 more rows come and the slot is dropped. The
// statistics now count no delete: on the old code recover republished the 5 rows and said every
// one confirmed. It must refuse, saying the statistics began again after the record began.
func TestRecoverRefusesAGapAfterTheStatisticsBeganAgain(t *testing.T) {
	heavy(t)
	pg := testenv.StartPostgres(t)
	testenv.RequireOwn(t, pg)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	if code := r.Stop(time.Minute); code != 0 {
		t.Fatalf("walbox run exited %d on SIGTERM:\n%s", code, testenv.Tail(r.Output(), 20))
	}
	w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', g::text, 'order.gone', '{}' FROM generate_series(1, 10) g`)
	w.exec(`DELETE FROM outbox WHERE event_type = 'order.gone'`)
	w.waitDeletes(10)
	w.conn.Close(context.Background())
	pg.Stop(t, "immediate")
	pg.Start(t)
	conn, err := pgx.Connect(context.Background(), w.db)
	if err != nil {
		t.Fatal(err)
	}
	w.conn = conn
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for i := range 5 {
		w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, 'order.after', '{}')`, itoa(i))
	}
	w.dropSlot()
	for _, args := range [][]string{{"--dry-run"}, nil} {
		out, code := w.walbox(nil, append([]string{"recover"}, args...)...)
		if code == 0 || !strings.Contains(out, "statistics began counting again") || !strings.Contains(out, "--accept-loss") ||
			strings.Contains(out, "every one confirmed") {
			t.Fatalf("walbox recover %v exited %d; want non-zero, naming the statistics begun again and --accept-loss:\n%s", args, code, out)
		}
	}
	out, code := w.walbox(nil, "recover", "--accept-loss")
	if code != 0 || !strings.Contains(out, "republished 5 rows") || strings.Contains(out, "every one confirmed") {
		t.Fatalf("walbox recover --accept-loss exited %d; want 0, the 5 rows left republished, the loss named:\n%s", code, out)
	}
	r = w.startRelay()
	r.waitState("streaming", time.Minute)
	r.Stop(time.Minute)
	w.dropSlot()
	// The record began again with the recovery, after the statistics did: a later gap is judged
	// by the deletes counted, and none were made.
	if out, code := w.walbox(nil, "recover"); code != 0 || !strings.Contains(out, "every one confirmed") {
		t.Fatalf("walbox recover of a later gap exited %d; want 0 and every one confirmed:\n%s", code, out)
	}
}

// A promoted standby counts none of the deletes made on the old primary. walbox is stopped, 10
// rows are committed and deleted by hand on the primary, 5 more come, and the standby is promoted
// without the slot. On the old code recover, pointed at the promoted server, republished the 5
// rows and said every one confirmed; it must refuse, naming the timelines.
func TestRecoverRefusesAGapAcrossAPromotion(t *testing.T) {
	heavy(t)
	primary := testenv.StartPostgres(t, testenv.PGVersion(17))
	testenv.RequireOwn(t, primary)
	standby := testenv.StartStandby(t, primary, "standby1")
	w := newWorld(t, primary, testenv.SharedRabbit(t))
	promoted := withHost(t, w.db, hostOf(t, standby.URL()))
	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	if code := r.Stop(time.Minute); code != 0 {
		t.Fatalf("walbox run exited %d on SIGTERM:\n%s", code, testenv.Tail(r.Output(), 20))
	}
	w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', g::text, 'order.gone', '{}' FROM generate_series(1, 10) g`)
	w.exec(`DELETE FROM outbox WHERE event_type = 'order.gone'`)
	for i := range 5 {
		w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, 'order.after', '{}')`, itoa(i))
	}
	w.waitDeletes(10)
	waitFor(t, time.Minute, "the standby to replay the rows", func() bool {
		var n int
		return execRow(t, promoted, "SELECT count(*) FROM public.outbox WHERE event_type = 'order.after'", &n) == nil && n == 5
	})
	standby.Promote(t)
	waitFor(t, time.Minute, "the promoted server to take writes", func() bool {
		var ro bool
		return execRow(t, promoted, "SELECT pg_is_in_recovery()", &ro) == nil && !ro
	})
	env := []string{"WALBOX_DATABASE_URL=" + promoted}
	for _, args := range [][]string{{"--dry-run"}, nil} {
		out, code := w.walbox(env, append([]string{"recover"}, args...)...)
		if code == 0 || !strings.Contains(out, "timeline 2") || !strings.Contains(out, "--accept-loss") ||
			strings.Contains(out, "every one confirmed") {
			t.Fatalf("walbox recover %v on the promoted server exited %d; want non-zero, naming the timelines and --accept-loss:\n%s", args, code, out)
		}
	}
	out, code := w.walbox(env, "recover", "--accept-loss")
	if code != 0 || !strings.Contains(out, "republished 5 rows") || strings.Contains(out, "every one confirmed") {
		t.Fatalf("walbox recover --accept-loss exited %d; want 0, the 5 rows left republished, the loss named:\n%s", code, out)
	}
}

// A loss accepted for one slot is that slot's only. Two relays stream one table through slots A
// and B; both stop, 10 rows are committed and deleted by hand, 5 more come, and both slots are
// dropped. recover --accept-loss for A takes the loss of A's gap; recover for B must still
// refuse: B's gap held the 10 rows too. On the old code the acceptance was the table's, and
// recover for B said every one confirmed.
func TestRecoverAcceptedLossIsOneSlots(t *testing.T) {
	heavy(t)
	a := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	b := a.in(t)
	b.slot = testenv.UniqueName("slot")
	for _, w := range []*world{a, b} {
		r := w.startRelay()
		r.waitState("streaming", time.Minute)
		if code := r.Stop(time.Minute); code != 0 {
			t.Fatalf("walbox run exited %d on SIGTERM:\n%s", code, testenv.Tail(r.Output(), 20))
		}
	}
	a.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', g::text, 'order.gone', '{}' FROM generate_series(1, 10) g`)
	a.exec(`DELETE FROM outbox WHERE event_type = 'order.gone'`)
	for i := range 5 {
		a.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, 'order.after', '{}')`, itoa(i))
	}
	a.waitDeletes(10)
	a.dropSlot()
	b.dropSlot()
	if out, code := a.walbox(nil, "recover"); code == 0 || !strings.Contains(out, "10 rows deleted") {
		t.Fatalf("walbox recover of slot A exited %d; want non-zero, naming the 10 rows deleted:\n%s", code, out)
	}
	if out, code := a.walbox(nil, "recover", "--accept-loss"); code != 0 || !strings.Contains(out, "republished 5 rows") {
		t.Fatalf("walbox recover --accept-loss of slot A exited %d; want 0, the 5 rows left republished:\n%s", code, out)
	}
	out, code := b.walbox(nil, "recover")
	if code == 0 || !strings.Contains(out, "10 rows deleted") || strings.Contains(out, "every one confirmed") {
		t.Fatalf("walbox recover of slot B, after the loss was accepted for A, exited %d; want non-zero, naming the 10 rows deleted:\n%s", code, out)
	}
}

// prune keeps the rows a recovered slot has not confirmed. Two relays stream one table through
// slots A and B. B's slot is lost and recovered; its record then says nothing of what it covers
// until B runs again. Rows come, A confirms them, and prune runs with A's settings. On the old
// code it found only A and deleted the rows, which B's new slot had not confirmed: were that slot
// lost too, recover would miss them and call prune's deletes explained.
func TestPruneKeepsRowsARecoveredSlotHasNotConfirmed(t *testing.T) {
	heavy(t)
	// A server of its own: another test's open transaction on a shared one holds the xmin horizon
	// back, and slot A's record with it.
	a := newWorld(t, testenv.StartPostgres(t), testenv.SharedRabbit(t))
	b := a.in(t)
	b.slot = testenv.UniqueName("slot")
	r := b.startRelay()
	r.waitState("streaming", time.Minute)
	if code := r.Stop(time.Minute); code != 0 {
		t.Fatalf("walbox run exited %d on SIGTERM:\n%s", code, testenv.Tail(r.Output(), 20))
	}
	b.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'order.before', '{}')`)
	b.dropSlot()
	if out, code := b.walbox(nil, "recover"); code != 0 {
		t.Fatalf("walbox recover of slot B exited %d:\n%s", code, out)
	}
	ra := a.startRelay()
	ra.waitState("streaming", time.Minute)
	a.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
		SELECT 'order', g::text, 'order.unconfirmed', '{}', now() - interval '1 minute' FROM generate_series(1, 12) g`)
	waitFor(t, 2*time.Minute, "slot A to confirm past the rows", func() bool {
		var past bool
		err := a.conn.QueryRow(context.Background(), `SELECT s.confirmed_xmin::text::bigint > (SELECT max(xmin::text::bigint) FROM outbox
			WHERE event_type = 'order.unconfirmed') FROM public.walbox_slots s WHERE s.slot_name = $1`, a.slot).Scan(&past)
		return err == nil && past
	})
	out, code := a.walbox(nil, "prune", "--older-than", "1s")
	var left int
	if err := a.conn.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE event_type = 'order.unconfirmed'").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if code != 0 || left != 12 || !strings.Contains(out, "kept 12 rows") || !strings.Contains(out, b.slot) {
		t.Fatalf("walbox prune --older-than 1s exited %d and left %d rows; want 0, the 12 rows slot B did not confirm kept, naming it:\n%s", code, left, out)
	}
}

// A table swapped in the gap takes the old table's rows of the gap with it. walbox is stopped,
// 10 rows are committed, the outbox is renamed away and a new one created in its place and
// published, 5 rows come, and the slot is dropped. recover must not call the gap filled.
func TestRecoverRefusesAGapATableSwapTook(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	if code := r.Stop(time.Minute); code != 0 {
		t.Fatalf("walbox run exited %d on SIGTERM:\n%s", code, testenv.Tail(r.Output(), 20))
	}
	w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', g::text, 'order.swapped', '{}' FROM generate_series(1, 10) g`)
	w.exec(`ALTER TABLE outbox RENAME TO outbox_old`)
	w.exec(`CREATE TABLE outbox (LIKE outbox_old INCLUDING ALL)`)
	w.exec(`ALTER PUBLICATION walbox ADD TABLE outbox`)
	for i := range 5 {
		w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, 'order.after', '{}')`, itoa(i))
	}
	w.dropSlot()
	for _, args := range [][]string{{"--dry-run"}, nil, {"--force"}} {
		out, code := w.walbox(nil, append([]string{"recover"}, args...)...)
		if code == 0 || !strings.Contains(out, "--accept-loss") || strings.Contains(out, "every one confirmed") {
			t.Fatalf("walbox recover %v exited %d; want non-zero, naming --accept-loss:\n%s", args, code, out)
		}
	}
}
