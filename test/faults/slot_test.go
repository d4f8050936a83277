package faults_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// The slot is dropped while the relay streams from it. walbox must stop with a clear error and a
// non-zero status, and must not create a new slot: that would start from now and skip every row
// committed in between. The refusal lives in the database, not in the process: a supervisor
// restarting walbox (compose's restart policy, a Kubernetes pod) gets the same refusal, and so does
// `walbox migrate`.
func TestSlotDroppedUnderRelay(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	v := w.startVerifier()
	cw := w.newWriter(checker.WriterConfig{Seed: 41})
	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	if err := cw.Tx(t.Context(), 50); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, v, 50, time.Minute)

	w.dropSlot()
	for i, rr := range []*relay{r, w.startRelay(), w.startRelay("WALBOX_CREATE_SLOT=true")} {
		code := rr.Wait(time.Minute)
		out := rr.Output()
		if code == 0 || !strings.Contains(out, "does not exist") || !strings.Contains(out, "will not recreate") ||
			!strings.Contains(out, "walbox recover") {
			t.Fatalf("walbox run %d exited %d after its slot was dropped; want non-zero and a clear error:\n%s", i, code, testenv.Tail(out, 20))
		}
		if exists, _, _ := w.slotInfo(); exists {
			t.Fatalf("the slot exists again after walbox run %d stopped: it was recreated", i)
		}
		t.Logf("walbox run %d exited %d: %s", i, code, lastLine(out, "relay stopped"))
	}
	if out, code := w.walbox(nil, "migrate"); code == 0 || !strings.Contains(out, "walbox recover") {
		t.Fatalf("walbox migrate exited %d with the recorded slot missing; want a refusal naming walbox recover:\n%s", code, out)
	}
	if exists, _, _ := w.slotInfo(); exists {
		t.Fatal("walbox migrate recreated a recorded slot")
	}
	w.verdict(cw, v, time.Minute, 1, 1, "")
}

// dropSlot drops the world's slot, terminating the walsender that holds it, as often as the
// relay grabs it again in between.
func (w *world) dropSlot() {
	w.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := w.conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE slot_name = $1 AND active_pid IS NOT NULL`, w.slot)
		if err == nil {
			_, err = w.conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", w.slot)
		}
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			return
		case !errors.As(err, &pgErr) || pgErr.Code != "55006" || time.Now().After(deadline):
			w.t.Fatalf("drop slot %s: %v", w.slot, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSlotInvalidated lets max_slot_wal_keep_size (1MB) invalidate the slot behind a relay that
// is dead or frozen. walbox must stop with a clear error and a non-zero status, leave the lost
// slot alone (no silent recreation), and `walbox status` must say so too.
func TestSlotInvalidated(t *testing.T) {
	heavy(t)
	pg := testenv.StartPostgres(t, testenv.WithSetting("max_slot_wal_keep_size", "1MB"))
	testenv.RequireOwn(t, pg)
	rabbit := testenv.SharedRabbit(t)

	t.Run("while the relay was down", func(t *testing.T) {
		w := newWorld(t, pg, rabbit)
		r := w.startRelay()
		r.waitState("streaming", time.Minute)
		r.Kill()
		w.burnWAL()
		r = w.startRelay()
		w.checkLostSlotRefused(r)
	})
	t.Run("while the relay was frozen (SIGSTOP)", func(t *testing.T) {
		w := newWorld(t, pg, rabbit)
		r := w.startRelay()
		r.waitState("streaming", time.Minute)
		r.Signal(syscall.SIGSTOP)
		w.burnWAL()
		r.Signal(syscall.SIGCONT)
		w.checkLostSlotRefused(r)
	})
}

// burnWAL writes, switches and checkpoints WAL until the slot is invalidated.
func (w *world) burnWAL() {
	w.t.Helper()
	ctx := context.Background()
	if _, err := w.conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS filler (x text)"); err != nil {
		w.t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		for _, sql := range []string{
			"INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 2000)",
			"SELECT pg_switch_wal()",
			"CHECKPOINT",
		} {
			if _, err := w.conn.Exec(ctx, sql); err != nil {
				w.t.Fatalf("%s: %v", sql, err)
			}
		}
		if _, _, status := w.slotInfo(); status == "lost" {
			return
		}
		if time.Now().After(deadline) {
			_, _, status := w.slotInfo()
			w.t.Fatalf("slot still %q after two minutes of WAL", status)
		}
	}
}

func (w *world) checkLostSlotRefused(r *relay) {
	w.t.Helper()
	code := r.Wait(time.Minute)
	out := r.Output()
	if code == 0 || !strings.Contains(out, "invalidated") {
		w.t.Fatalf("walbox run exited %d on an invalidated slot; want non-zero and a clear error:\n%s", code, testenv.Tail(out, 20))
	}
	w.t.Logf("walbox run exited %d: %s", code, lastLine(out, "relay stopped"))
	if exists, _, status := w.slotInfo(); !exists || status != "lost" {
		w.t.Fatalf("after walbox run: slot exists=%t wal_status=%q; want the lost slot left alone", exists, status)
	}
	st, code := w.walbox(nil, "status")
	if code == 0 || !strings.Contains(st, "lost") {
		w.t.Errorf("walbox status exited %d on an invalidated slot:\n%s", code, st)
	}
	w.t.Logf("SUMMARY %s faults=1 exit_code=%d slot_recreated=false status_exit_code=%d", w.t.Name(), r.ExitCode(), code)
}

// lastLine returns the last line of out that contains s.
func lastLine(out, s string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}
