package faults_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/test/checker"
	walboxwire "github.com/walbox/walbox/wire"
)

// restoreFault restores pg's data directory from a copy taken when it is called. It stops the
// server, copies its data directory and starts it again. Then between writes and relays more
// rows. Then the server stops and the copy goes back in place. The server comes back with its
// system identifier and timeline, at the older WAL position. The slot and walbox's record are as
// they were at the copy; the broker, the stream and consumers keep what they got meanwhile. No
// relay may run while it stops the server: between stops the relays it starts.
func restoreFault(t *testing.T, pg *testenv.Postgres, between func()) {
	t.Helper()
	restoreCopy(t, pg, between, false)
}

// restoreToNewTimeline is restoreFault with the copy started through recovery: it ends at once
// (recovery_target immediate) and the server goes on, on a new timeline.
func restoreToNewTimeline(t *testing.T, pg *testenv.Postgres, between func()) {
	t.Helper()
	restoreCopy(t, pg, between, true)
}

func restoreCopy(t *testing.T, pg *testenv.Postgres, between func(), newTimeline bool) {
	t.Helper()
	testenv.RequireOwn(t, pg)
	data := filepath.Join(pg.Dir(), "data")
	backup := filepath.Join(t.TempDir(), "data")
	copyDir := func(from, to string) {
		t.Helper()
		if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
			t.Fatalf("cp -a %s %s: %v\n%s", from, to, err, out)
		}
	}
	pg.Stop(t, "fast")
	copyDir(data, backup)
	pg.Start(t)
	between()
	pg.Stop(t, "fast")
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	copyDir(backup, data)
	if newTimeline {
		recovery := "\nrestore_command = 'false'\n"
		f, err := os.OpenFile(filepath.Join(data, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0o600)
		if err == nil {
			_, err = f.WriteString(recovery)
			err = errors.Join(err, f.Close(), os.WriteFile(filepath.Join(data, "recovery.signal"), nil, 0o600))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	pg.Start(t)
	if newTimeline {
		waitFor(t, time.Minute, "the restored server to end its recovery", func() bool {
			var recovering bool
			return execRow(t, pg.URL(), "SELECT pg_catalog.pg_is_in_recovery()", &recovering) == nil && !recovering
		})
	}
}

// restoreCell is one mode of TestRestoredDatabase.
type restoreCell struct {
	name   string
	stream bool    // publish into a stream (--stream-url)
	emit   float64 // the share of rows written through walbox_emit
	config string  // a config file's tables section; "" for none
	// past: the restored server writes past the relay's last row before walbox starts, so that
	// this row's commit LSN is in its WAL again
	past bool
	// short: the restored server writes a few rows only before walbox starts, so that its WAL ends
	// before the relay's last row: run stops at start
	short bool
	// positions: the table's message ids come from commit positions (message-id: position). The
	// rows written after the restore must reach an exactly-once consumer, which drops a message
	// whose id it handled.
	positions bool
	// newTimeline: the copy is started through recovery, onto a new timeline; else it is a plain
	// copy, on its old timeline.
	newTimeline bool
	// canary: every relay writes and relays a canary every 100 ms, among the rows
	canary bool
	// quick: `make test` runs the cell; `make soak` runs every cell. Every mode is in a quick one.
	// An emit cell writes half its rows through the table, so it covers table ids too.
	quick bool
}

// A data directory restored from a copy taken before the relay's last rows, in each mode. Rows
// are written and relayed, the copy taken, more rows written and relayed, the copy put back, and
// new rows written before walbox starts. walbox must deliver every row committed after the
// restore, or stop with one line naming the cause and the way out; the way out then delivers
// the new rows. Position ids are restored both ways: a plain copy writes new transactions at the
// commit LSNs of relayed ones, and only their commit time tells them apart.
func TestRestoredDatabase(t *testing.T) {
	heavy(t)
	for _, c := range []restoreCell{
		{name: "amqp table ids"},
		{name: "amqp walbox_emit", emit: 0.5, quick: true},
		{name: "amqp mapped table", config: "tables:\n  - table: public.outbox\n    id: id\n    payload: payload\n", quick: true},
		{name: "amqp position ids on a new timeline", positions: true, newTimeline: true,
			config: "tables:\n  - table: public.outbox\n    message-id: position\n", quick: true},
		{name: "amqp position ids, plain copy", positions: true,
			config: "tables:\n  - table: public.outbox\n    message-id: position\n", quick: true},
		{name: "stream table ids", stream: true},
		{name: "stream walbox_emit", stream: true, emit: 0.5},
		{name: "stream written past the last row", stream: true, past: true},
		{name: "stream walbox_emit written past the last row", stream: true, emit: 0.5, past: true, quick: true},
		{name: "stream short of the last row", stream: true, short: true, quick: true},
		{name: "stream position ids written past the last row", stream: true, past: true,
			config: "tables:\n  - table: public.outbox\n    message-id: position\n", quick: true},
		{name: "stream with canaries written past the last row", stream: true, past: true, canary: true},
		{name: "stream with canaries", stream: true, canary: true, quick: true},
	} {
		if !c.quick && !soaking() {
			continue
		}
		t.Run(c.name, func(t *testing.T) { restoredDatabase(t, c) })
	}
}

func restoredDatabase(t *testing.T, c restoreCell) {
	pg := testenv.StartPostgres(t)
	testenv.RequireOwn(t, pg)
	var rabbit *testenv.Rabbit
	if c.stream {
		rabbit = testenv.SharedRabbitStream(t)
	} else {
		rabbit = testenv.SharedRabbit(t)
	}
	w := newWorld(t, pg, rabbit)
	var env []string
	if c.config != "" {
		conf := filepath.Join(t.TempDir(), "tables.yaml")
		if err := os.WriteFile(conf, []byte(c.config), 0o600); err != nil {
			t.Fatal(err)
		}
		env = append(env, "WALBOX_CONFIG="+conf)
	}
	name := testenv.UniqueName("events")
	if c.stream {
		env = append(env, "WALBOX_STREAM_URL="+rabbit.StreamURL(), "WALBOX_STREAM="+name)
	}
	if c.canary {
		env = append(env, "WALBOX_CANARY_INTERVAL=100ms")
	}
	var committed []checker.Row
	write := func(seed uint64, txs int) {
		t.Helper()
		wr := w.newWriter(checker.WriterConfig{Seed: seed, Name: fmt.Sprintf("agg%d", seed), Emit: c.emit})
		for range txs {
			if err := wr.Tx(t.Context(), 5); err != nil {
				t.Fatal(err)
			}
		}
		wr.Close()
		committed = append(committed, wr.Committed()...)
	}
	var sr *streamReader
	var v *checker.Verifier
	if c.stream {
		sr = readStream(t, rabbit.StreamURL(), name)
	} else {
		v = w.startVerifier()
	}
	delivered := func() int {
		if c.stream {
			return rowsIn(sr)
		}
		return v.Count()
	}
	relayAll := func() {
		t.Helper()
		r := w.startRelay(env...)
		want := len(committed)
		waitFor(t, 2*time.Minute, fmt.Sprintf("%d rows delivered", want), func() bool { return delivered() >= want })
		time.Sleep(time.Second) // the slot catches up with the confirms
		if code := r.Stop(time.Minute); code != 0 {
			t.Fatalf("walbox run exited %d:\n%s", code, r.Output())
		}
	}

	write(41, 20)
	relayAll()
	restore := restoreFault
	if c.newTimeline {
		restore = restoreToNewTimeline
	}
	restore(t, pg, func() {
		write(42, 20)
		relayAll()
	})
	before, txs := len(committed), 20
	switch {
	case c.past:
		txs = 40
	case c.short:
		txs = 2
	}
	write(43, txs) // after the restore, at positions the relayed rows had
	after := committed[before:]

	r := w.startRelay(env...)
	if c.positions {
		exactlyOnceGetsEvery(t, v, after, r)
		return
	}
	if !c.stream {
		rep := v.Await(t.Context(), committed, 2*time.Minute)
		if err := rep.Err(); err != nil {
			t.Errorf("rows committed after the restore: %v\n%s\n%s", err, rep, r.Output())
		}
		return
	}
	stored := sr.count()
	waitFor(t, 2*time.Minute, "walbox to stop, or every row committed after the restore in the stream", func() bool {
		return r.Exited() || len(notInStream(sr, after)) == 0
	})
	if !r.Exited() {
		t.Logf("walbox delivered every row committed after the restore into the stream")
		return
	}
	stoppedOnRestore(t, w, r, env)
	if got := sr.count(); got != stored {
		t.Errorf("the stream went from %d to %d messages on the restored server", stored, got)
	}
	wayOutNewStream(t, w, rabbit, env, after)
}

// rowsIn counts the messages of the stream read by sr that are not canaries.
func rowsIn(sr *streamReader) int {
	n := 0
	for _, m := range sr.messages() {
		if t, _ := m.ApplicationProperties[streampub.PropEventType].(string); !walboxwire.IsCanary(t, m.ApplicationProperties) {
			n++
		}
	}
	return n
}

// notInStream returns the ids of rows the stream read by sr does not hold. A row is held under its
// id, or under a position id: then its body names its aggregate and sequence number.
func notInStream(sr *streamReader, rows []checker.Row) []string {
	seen := map[string]bool{}
	for _, m := range sr.messages() {
		seen[fmt.Sprint(m.Properties.MessageID)] = true
		var body struct {
			Aggregate string `json:"aggregate"`
			Seq       int64  `json:"seq"`
		}
		if json.Unmarshal(bytes.Join(m.Data, nil), &body) == nil {
			seen[fmt.Sprintf("%s/%d", body.Aggregate, body.Seq)] = true
		}
	}
	var ids []string
	for _, row := range rows {
		if !seen[row.ID] && !seen[fmt.Sprintf("%s/%d", row.Aggregate, row.Seq)] {
			ids = append(ids, row.ID)
		}
	}
	return ids
}

// stoppedOnRestore checks that the relay r stopped on the restored server in one line naming the
// cause and the way out. Then status and doctor fail, and recover --dry-run exits 1, each with
// run's cause and the way out. Run stops at start on the stream's last row beyond the server's
// WAL. It stops at a row it would skip when the server wrote past that row: status, doctor and
// recover peek the slot to find it.
func stoppedOnRestore(t *testing.T, w *world, r *relay, env []string) {
	t.Helper()
	code := r.Wait(time.Minute)
	out := r.Output()
	t.Logf("walbox run exited %d:\n%s", code, out)
	if code == 0 || !strings.Contains(out, "WAL does not have") || !strings.Contains(out, "restored") ||
		!strings.Contains(out, "new stream") {
		t.Fatalf("walbox run exited %d; want a stop naming the restored data directory and the way out:\n%s", code, out)
	}
	// run's cause, without the positions: "the last stored row was committed at ... and this
	// server's WAL ends at", or "at <position>, before the stream's last row".
	cause := "the stream holds rows this server's WAL does not have: the last stored row was committed at"
	if !strings.Contains(out, cause) {
		cause = "the stream holds rows this server's WAL does not have: at "
	}
	for _, args := range [][]string{{"status"}, {"doctor"}, {"recover", "--dry-run"}} {
		got, code := w.walbox(env, args...)
		t.Logf("walbox %s exited %d:\n%s", strings.Join(args, " "), code, got)
		if code == 0 || !strings.Contains(got, cause) || !strings.Contains(got, "restored") || !strings.Contains(got, "new stream") {
			t.Errorf("walbox %s exited %d; want run's cause (%q), the way out and a non-zero exit:\n%s",
				strings.Join(args, " "), code, cause, got)
		}
	}
}

// wayOutNewStream follows the way out the stop names: walbox run into a new stream delivers
// every row committed after the restore.
func wayOutNewStream(t *testing.T, w *world, rabbit *testenv.Rabbit, env []string, after []checker.Row) {
	t.Helper()
	fresh := testenv.UniqueName("events")
	sr := readStream(t, rabbit.StreamURL(), fresh)
	w.startRelay(append(env, "WALBOX_STREAM="+fresh)...)
	waitFor(t, 2*time.Minute, "every row committed after the restore in the new stream", func() bool {
		return len(notInStream(sr, after)) == 0
	})
}

// exactlyOnceGetsEvery waits until a consumer that handles each message id once, as the
// consumer package does, got every row of after. Position ids are not the rows' own, so rows
// are matched by body.
func exactlyOnceGetsEvery(t *testing.T, v *checker.Verifier, after []checker.Row, r *relay) {
	t.Helper()
	var lost int
	waitFor(t, 2*time.Minute, "every row committed after the restore handled by an exactly-once consumer", func() bool {
		seen, handled := map[string]bool{}, map[string]bool{}
		for _, d := range v.Deliveries() {
			if !seen[d.ID] {
				seen[d.ID] = true
				handled[fmt.Sprintf("%s/%d", d.Aggregate, d.Seq)] = true
			}
		}
		lost = 0
		for _, row := range after {
			if !handled[fmt.Sprintf("%s/%d", row.Aggregate, row.Seq)] {
				lost++
			}
		}
		return lost == 0
	})
	if r.Exited() {
		t.Errorf("walbox run exited:\n%s", r.Output())
	}
}
