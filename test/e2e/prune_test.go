package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/testenv"
)

// age makes the rows of txns two days old.
func (w *world) age(txns ...txn) {
	w.t.Helper()
	if _, err := w.conn.Exec(context.Background(), "UPDATE outbox SET created_at = now() - interval '2 days' WHERE id = ANY($1)",
		allIDs(txns)); err != nil {
		w.t.Fatal(err)
	}
}

// outboxIDs returns the ids in the outbox table, sorted.
func (w *world) outboxIDs() []string {
	w.t.Helper()
	rows, err := w.conn.Query(context.Background(), "SELECT id::text FROM outbox ORDER BY id")
	if err != nil {
		w.t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		w.t.Fatal(err)
	}
	return ids
}

func sortedIDs(txns ...txn) []string {
	var out []string
	for _, id := range allIDs(txns) {
		out = append(out, id.String())
	}
	slices.Sort(out)
	return out
}

func TestPruneDeletesOnlyOldRowsInBatches(t *testing.T) {
	pg := testenv.StartPostgres(t)
	// The recorded horizon is the server's oldest running transaction: on a shared external
	// server another test's open transaction holds prune back.
	testenv.RequireOwn(t, pg)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	var old []txn
	for range 5 {
		old = append(old, w.insertTx(w.conn, 250, "order.created"))
	}
	w.age(old...)
	recent := w.insertTx(w.conn, 40, "order.created")

	// No relay has confirmed them yet: prune keeps them, whatever their age, and says why.
	out, code := w.walbox(nil, "prune", "--older-than", "24h", "--dry-run")
	if code != 0 || !strings.Contains(out, "would delete 0 rows") || !strings.Contains(out, "kept 1250 rows") {
		t.Fatalf("prune --dry-run before any relay ran: exit %d, output %q: want 0 counted and 1250 kept back", code, out)
	}
	w.startRelay()
	w.drain(append(old, recent), nil, time.Minute)
	out = w.waitPrunable(1250)
	if n := len(w.outboxIDs()); n != 1290 {
		t.Fatalf("%d rows after a dry run, want all 1290:\n%s", n, out)
	}

	out, code = w.walbox([]string{"WALBOX_PRUNE_BATCH_SIZE=500"}, "prune", "--older-than", "1d")
	if code != 0 || !strings.Contains(out, "deleted 1250 rows created before ") || !strings.Contains(out, "in 3 batches") {
		t.Fatalf("prune: exit %d, output %q: want 1250 rows deleted in 3 batches", code, out)
	}
	if got, want := w.outboxIDs(), sortedIDs(recent); !slices.Equal(got, want) {
		t.Fatalf("%d rows left, want the %d recent ones", len(got), len(want))
	}

	out, code = w.walbox(nil, "prune", "--older-than", "1d")
	if code != 0 || !strings.Contains(out, "deleted 0 rows") {
		t.Fatalf("second prune: exit %d, output %q: want 0 rows deleted", code, out)
	}

	for _, args := range [][]string{{}, {"--older-than", "-5m"}, {"--older-than", "soon"}, {"--older-than", "1h", "--batch-size", "0"},
		{"--older-than", "1h", "--pause", "-1s"}} {
		out, code := w.walbox(nil, append([]string{"prune"}, args...)...)
		if code != 2 {
			t.Errorf("prune %v: exit %d, output %q: want 2 for a bad setting", args, code, out)
		}
	}
}

// Deleting outbox rows never loses a message: the insert is in the WAL, the publication does not
// publish deletes. Rows pruned before the relay ever ran, rows pruned after it published them and
// rows inserted while prune runs all arrive.
func TestPruneWhileRelayRuns(t *testing.T) {
	pg := testenv.StartPostgres(t)
	// The recorded horizon is the server's oldest running transaction: on a shared external
	// server another test's open transaction holds prune back.
	testenv.RequireOwn(t, pg)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	var before []txn
	for range 10 {
		before = append(before, w.insertTx(w.conn, 100, "order.created"))
	}
	w.age(before...)
	if out, code := w.walbox(nil, "prune", "--older-than", "1d"); code != 0 || !strings.Contains(out, "deleted 0 rows") ||
		!strings.Contains(out, "kept 1000 rows") {
		t.Fatalf("prune before the relay runs: exit %d, output %q: want nothing deleted, 1000 rows kept for the relay", code, out)
	}

	w.startRelay()
	var during []txn
	for range 10 {
		during = append(during, w.insertTx(w.conn, 100, "order.created"))
	}
	w.age(during...)
	relayed := w.drain(append(before, during...), nil, time.Minute)
	w.waitPrunable(2000)

	// A writer keeps inserting new rows while prune runs.
	ctx, stop := context.WithCancel(context.Background())
	var (
		wg       sync.WaitGroup
		inserted []txn
		werr     error
	)
	conn := w.pg.Conn(t, w.db)
	t.Cleanup(func() { stop(); wg.Wait() }) // before conn's cleanup closes it
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			x, err := insertRows(conn, 5)
			if err != nil {
				werr = err
				return
			}
			inserted = append(inserted, x)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	out, code := w.walbox(nil, "prune", "--older-than", "1d", "--batch-size", "100", "--pause", "20ms")
	stop()
	wg.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	if code != 0 || !strings.Contains(out, "deleted 2000 rows") || !strings.Contains(out, "in 20 batches") {
		t.Fatalf("prune while relaying: exit %d, output %q: want 2000 rows deleted in 20 batches", code, out)
	}
	if len(inserted) == 0 {
		t.Fatal("the writer inserted nothing while prune ran")
	}
	if got, want := w.outboxIDs(), sortedIDs(inserted...); !slices.Equal(got, want) {
		t.Fatalf("%d rows left, want the %d inserted while prune ran", len(got), len(want))
	}

	all := append(append(before, during...), inserted...)
	got := append(relayed, w.drain(all, relayed, time.Minute)...)
	dups := checkAll(t, all, got)
	t.Logf("%d messages arrived (%d rows kept by prune until the relay confirmed them, %d written while it ran, %d inserted while prune ran), %d duplicates",
		len(got), 1000, 1000, 5*len(inserted), dups)
}

// waitPrunable waits until the relay confirmed n old rows, so that prune --dry-run counts them,
// and returns its output.
func (w *world) waitPrunable(n int) string {
	w.t.Helper()
	want := fmt.Sprintf("would delete %d rows", n)
	var out string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var code int
		out, code = w.walbox(nil, "prune", "--older-than", "1d", "--dry-run")
		if code == 0 && strings.Contains(out, want) {
			return out
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("prune --dry-run never counted %d rows as confirmed: exit %d, output %q", n, code, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// insertRows commits one transaction of n new rows; unlike insertTx it may run on any goroutine.
func insertRows(conn *pgx.Conn, n int) (txn, error) {
	rows := make([][]any, n)
	ids := make([]uuid.UUID, n)
	for i := range rows {
		ids[i] = uuid.New()
		rows[i] = []any{ids[i], "order", "during-prune", "order.created", fmt.Sprintf(`{"seq": %d}`, i), `{}`}
	}
	_, err := conn.CopyFrom(context.Background(), pgx.Identifier{"outbox"},
		[]string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers"}, pgx.CopyFromRows(rows))
	return txn{ids: ids}, err
}
