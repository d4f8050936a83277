package faults_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
)

// An outbox row kept longer than two billion transactions (weeks at a thousand a second) is frozen,
// and its xmin alone no longer tells its age. Replay still sends it, before the newer rows.
func TestReplaySendsRowsOlderThanTwoBillionTransactions(t *testing.T) {
	heavy(t)
	pg := testenv.StartPostgres(t)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	// The slot would hold back the freezing of the catalogs; replay needs none.
	w.exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, w.slot)
	w.insertRows(10)
	oldIDs := map[string]bool{}
	for _, id := range w.texts("SELECT id::text FROM public.outbox") {
		oldIDs[id] = true
	}
	pg.JumpXID(t, 2_000_000_000)
	pg.JumpXID(t, 2_600_000_000)
	w.conn = pg.Conn(t, w.db)
	var age int64
	if err := w.conn.QueryRow(t.Context(), `SELECT pg_current_xact_id()::text::bigint - min(xmin::text::bigint) FROM public.outbox`).Scan(&age); err != nil {
		t.Fatal(err)
	}
	if age < 1<<31 {
		t.Fatalf("the first rows are %d transactions old; want more than 2^31", age)
	}
	w.insertRows(10)

	out, code := w.walbox(nil, "replay", "--rate=0")
	if code != 0 || !strings.Contains(out, "20 rows matched") {
		t.Fatalf("walbox replay exited %d; want 0 and 20 rows matched:\n%s", code, out)
	}
	got := map[string]int{}
	var order []string
	w.eachInQueue(w.queue, func(d amqp.Delivery) {
		got[d.MessageId]++
		order = append(order, d.MessageId)
	})
	w.checkEveryMatchedRow(got, "TRUE")
	for i, id := range order {
		if old := i < len(oldIDs); old != oldIDs[id] {
			t.Errorf("delivery %d is row %s, old %v; want the 10 old rows first", i, id, oldIDs[id])
		}
	}
}

// A transaction running when the replay first starts is not the replay's, savepoints and all. Its
// rows written in a subtransaction were told apart from it by no run: a resume after its commit sent
// them, without the rows of its top level.
func TestReplayLeavesOutSubtransactionsOfATransactionRunningAtStart(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	w.insertRows(20)
	ctx := t.Context()
	tx := w.openTx(
		`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('late', '1', 'top', '{}')`,
		`SAVEPOINT s`,
		`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('late', '1', 'savepoint', '{}')`,
		`RELEASE SAVEPOINT s`)
	// A transaction after it commits first: the start's snapshot then reaches past the savepoint's id.
	w.insertRows(1)

	// The first run records its start, then is killed; the transaction commits; the replay resumes.
	cmd := exec.Command(walboxBin(t), "replay", "--rate=1")
	cmd.Env = w.env(nil)
	p := testenv.Start(t, cmd)
	p.WaitFor("the replay's start recorded", 2*time.Minute, func() bool {
		if p.Exited() {
			t.Fatalf("walbox replay exited %d before the kill:\n%s", p.ExitCode(), testenv.Tail(p.Output(), 20))
		}
		return len(w.texts("SELECT replay_id FROM public.walbox_replays")) > 0
	})
	p.Kill()
	p.Wait(time.Minute)
	waitFor(t, time.Minute, "the killed replay's session to end", func() bool {
		return len(w.texts("SELECT pid::text FROM pg_stat_activity WHERE application_name = 'walbox replay'")) == 0
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	out, code := w.walbox(nil, "replay", "--rate=0")
	if code != 0 || !strings.Contains(out, "resumed") {
		t.Fatalf("walbox replay run again exited %d; want 0 and a resume:\n%s", code, out)
	}
	got := map[string]int{}
	w.eachInQueue(w.queue, func(d amqp.Delivery) { got[d.MessageId]++ })
	w.checkEveryMatchedRow(got, "aggregate_type <> 'late'")
}

// A replay killed while its session waits on a lock leaves that session behind: the server does
// not look at the client while it waits. It held the replay's lock, and refused the rerun, until
// the wait ended. Now the server checks the client each second, and the rerun waits for the lock.
func TestReplayRerunAfterAKillWhileTheSessionWaits(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	w.insertRows(50)
	ctx := t.Context()
	tx := w.openTx(`LOCK TABLE public.walbox_replays IN ACCESS EXCLUSIVE MODE`)
	holder := func() string {
		pids := w.texts(`SELECT l.pid::text FROM pg_locks l JOIN pg_stat_activity a USING (pid)
			WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = 'walbox replay'`)
		if len(pids) == 0 {
			return ""
		}
		return pids[0]
	}
	start := func() *testenv.Program {
		cmd := exec.Command(walboxBin(t), "replay", "--rate=0")
		cmd.Env = w.env(nil)
		return testenv.Start(t, cmd)
	}
	first := start()
	var killed string
	first.WaitFor("the replay to hold its lock and wait on walbox_replays", 2*time.Minute, func() bool {
		if first.Exited() {
			t.Fatalf("walbox replay exited %d:\n%s", first.ExitCode(), testenv.Tail(first.Output(), 20))
		}
		killed = holder()
		return killed != ""
	})
	first.Kill()

	rerun := start()
	rerun.WaitFor("the rerun to take the replay's lock", 2*time.Minute, func() bool {
		if rerun.Exited() {
			t.Fatalf("walbox replay run again after the kill exited %d; want it to wait for the killed run's session:\n%s",
				rerun.ExitCode(), testenv.Tail(rerun.Output(), 20))
		}
		h := holder()
		return h != "" && h != killed
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if code := rerun.Wait(2 * time.Minute); code != 0 {
		t.Fatalf("walbox replay run again exited %d:\n%s", code, testenv.Tail(rerun.Output(), 20))
	}
	got := map[string]int{}
	w.eachInQueue(w.queue, func(d amqp.Delivery) { got[d.MessageId]++ })
	w.checkEveryMatchedRow(got, "TRUE")
}

// openTx begins a transaction on a connection of its own, runs the statements in it, and leaves it
// open. The test's end rolls it back.
func (w *world) openTx(statements ...string) pgx.Tx {
	w.t.Helper()
	tx, err := w.pg.Conn(w.t, w.db).Begin(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	for _, sql := range statements {
		if _, err := tx.Exec(context.Background(), sql); err != nil {
			w.t.Fatal(err)
		}
	}
	return tx
}
