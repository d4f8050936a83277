package faults_test

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// Stops that only `walbox recover` gets past, once their cause is put right: every command must
// agree on them, and the way out must deliver every row.

// event_type is renamed while walbox streams, rows are written under the new name, and the
// rename is undone. The WAL still holds those rows under the renamed column, so the slot can never
// deliver them: walbox run keeps stopping, and must say so, with the way out and the real position;
// doctor, status and recover --dry-run must see the same stop; the named command delivers every row.
func TestUndoneRenameStopNamesItsWayOut(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	v, cw, r := w.streaming(47)

	w.exec("ALTER TABLE outbox RENAME COLUMN event_type TO kind")
	var renamed []string
	for range 3 {
		var id string
		if err := w.conn.QueryRow(context.Background(), `INSERT INTO outbox (aggregate_type, aggregate_id, kind, payload)
			VALUES ('order', 'renamed', 'order.created', '{}') RETURNING id::text`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		renamed = append(renamed, id)
	}
	w.expectNamedStop(r, `no column "event_type"`)
	w.exec("ALTER TABLE outbox RENAME COLUMN kind TO event_type")
	if err := cw.Tx(t.Context(), 10); err != nil {
		t.Fatal(err)
	}
	w.expectWayOut(v, cw, renamed, `no column "event_type"`)
}

// The publication is dropped while walbox streams, rows are written, and the publication is
// created again (as walbox migrate created it). Nothing decoded the rows written meanwhile.
func TestRecreatedPublicationStopNamesItsWayOut(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	v, cw, r := w.streaming(48)

	w.exec("DROP PUBLICATION walbox")
	if err := cw.Tx(t.Context(), 10); err != nil {
		t.Fatal(err)
	}
	w.expectNamedStop(r, "publication")
	w.exec("CREATE PUBLICATION walbox FOR TABLE outbox WITH (publish = 'insert')")
	if err := cw.Tx(t.Context(), 10); err != nil {
		t.Fatal(err)
	}
	w.expectWayOut(v, cw, nil, "publication")
}

// republishedRows is the count walbox recover reports.
var republishedRows = regexp.MustCompile(`republished (\d+) rows`)

// wayOut is the command every stop below must name.
const wayOut = "walbox recover --force"

var stoppedAt = regexp.MustCompile(`stopped at (\d+/[0-9A-F]+)`)

// expectNamedStop waits for the relay r to stop, and checks that its error names the cause, the
// way out and the real position up to which everything was delivered.
func (w *world) expectNamedStop(r *relay, cause string) {
	w.t.Helper()
	code := r.Wait(time.Minute)
	out := r.Output()
	m := stoppedAt.FindStringSubmatch(out)
	if code == 0 || !strings.Contains(out, cause) || !strings.Contains(out, wayOut) || m == nil || m[1] == "0/0" ||
		strings.Contains(out, "at 0/0 ") {
		w.t.Fatalf("walbox run exited %d; want non-zero, %q, %q and real positions (stopped at ...):\n%s",
			code, cause, wayOut, testenv.Tail(out, 20))
	}
	w.t.Logf("walbox run, stopping:\n%s", testenv.Tail(out, 1))
}

// expectWayOut checks what every command says of a stop that only walbox recover gets past, with
// its cause put right: walbox run stops naming the way out and a real position, walbox doctor
// fails naming it, walbox status fails, walbox recover --dry-run counts the rows it would
// republish. Then it takes the way out and checks that every committed row (and the rows extra,
// written outside the writer) arrives.
func (w *world) expectWayOut(v *checker.Verifier, cw *checker.Writer, extra []string, cause string) {
	t := w.t
	t.Helper()
	r := w.startRelay()
	code := r.Wait(time.Minute)
	out := r.Output()
	m := stoppedAt.FindStringSubmatch(out)
	if code == 0 || !strings.Contains(out, wayOut) || !strings.Contains(out, cause) || m == nil || m[1] == "0/0" {
		t.Fatalf("walbox run exited %d; want non-zero, %q, %q and a real position (stopped at ...):\n%s",
			code, cause, wayOut, testenv.Tail(out, 20))
	}
	t.Logf("walbox run:\n%s", testenv.Tail(out, 2))
	recorded := w.lsn("SELECT confirmed_lsn::text FROM walbox_slots WHERE slot_name = $1", w.slot)
	if m[1] != recorded.String() {
		t.Errorf("walbox run says it stopped at %s; walbox recorded %s", m[1], recorded)
	}
	slot := w.confirmedLSN()

	out, code = w.walbox(nil, "doctor")
	if code == 0 || !strings.Contains(out, "FAIL") || !strings.Contains(out, wayOut) || !strings.Contains(out, m[1]) {
		t.Errorf("walbox doctor exited %d; want a failure naming %q and %s:\n%s", code, wayOut, m[1], out)
	}
	t.Logf("walbox doctor (exit %d):\n%s", code, out)
	out, code = w.walbox(nil, "status")
	if code == 0 || !strings.Contains(out, "stopped") || !strings.Contains(out, wayOut) {
		t.Errorf("walbox status exited %d; want non-zero and the stop with %q:\n%s", code, wayOut, out)
	}
	t.Logf("walbox status (exit %d):\n%s", code, out)

	lost := checker.Check(cw.Committed(), v.Deliveries()).Lost + len(extra)
	if lost == 0 {
		t.Fatal("no committed row is missing from the queue: the test proves nothing")
	}
	out, code = w.walbox(nil, "recover", "--dry-run")
	n := wouldRepublish.FindStringSubmatch(out)
	if code != 0 || n == nil || !strings.Contains(out, "stopped") {
		t.Fatalf("walbox recover --dry-run exited %d; want 0, the stop and a count:\n%s", code, out)
	}
	t.Logf("walbox recover --dry-run (%d rows missing from the queue):\n%s", lost, out)
	if got, _ := strconv.Atoi(n[1]); got < lost {
		t.Errorf("walbox recover --dry-run counts %d rows, fewer than the %d missing from the queue:\n%s", got, lost, out)
	}
	if got := w.confirmedLSN(); got != slot {
		t.Fatalf("walbox recover --dry-run moved the slot from %s to %s", slot, got)
	}

	out, code = w.walbox(nil, strings.Fields(wayOut)[1:]...)
	if code != 0 || !republished.MatchString(out) {
		t.Fatalf("%s exited %d:\n%s", wayOut, code, out)
	}
	// Nothing was written since the dry run: it counted exactly the rows recover republished.
	if got := republishedRows.FindStringSubmatch(out); got == nil || got[1] != n[1] {
		t.Errorf("walbox recover --dry-run counted %s rows; %s republished:\n%s", n[1], wayOut, out)
	}
	out, code = w.walbox(nil, "doctor")
	if strings.Contains(out, "stopped at") {
		t.Errorf("walbox doctor still reports the stop after %s (exit %d):\n%s", wayOut, code, out)
	}
	r = w.startRelay()
	r.waitState("streaming", time.Minute)
	if err := cw.Tx(t.Context(), 10); err != nil {
		t.Fatal(err)
	}
	// Not w.verdict: the extra rows are no writer's, and would count as malformed deliveries.
	if err := cw.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	rep := v.Await(context.Background(), cw.Committed(), time.Minute)
	t.Logf("SUMMARY %s %s", t.Name(), rep)
	if rep.Lost != 0 || rep.Committed == 0 {
		t.Errorf("lost %d of %d committed rows after %s", rep.Lost, rep.Committed, wayOut)
	}
	for _, id := range extra {
		if !slices.ContainsFunc(v.Deliveries(), func(d checker.Delivery) bool { return d.ID == id }) {
			t.Errorf("row %s, written while the column was renamed, was never delivered", id)
		}
	}
}
