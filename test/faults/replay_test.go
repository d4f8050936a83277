package faults_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
	walboxwire "github.com/walbox/walbox/wire"
)

// walbox replay, end to end with the real binary: a replay SIGKILLed halfway resumes from the
// progress it recorded in walbox_replays and finishes. Every matched row is delivered at least
// once, nothing else is, and the slot does not move. make test replays 5,000 rows, the soak
// 100,000 (WALBOX_REPLAY_ROWS sets another number).
func TestReplayKilledHalfwayResumes(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	rows := soakInt("WALBOX_REPLAY_ROWS", 5000, 100000)
	w.insertRows(rows)
	slot := w.slotLSN()

	// A rate that takes about sixteen seconds: the kill comes between two records of progress. A second
	// run waits three seconds for the lock before it refuses: the first still runs then.
	cmd := exec.Command(walboxBin(t), "replay", "--rate="+itoa(rows/16))
	cmd.Env = w.env(nil)
	p := testenv.Start(t, cmd)
	p.WaitFor("half the rows confirmed", 3*time.Minute, func() bool {
		if p.Exited() {
			t.Fatalf("walbox replay exited %d before the kill:\n%s", p.ExitCode(), testenv.Tail(p.Output(), 20))
		}
		return w.replaySent() >= int64(rows/2)
	})
	// The same replay run again meanwhile is refused: the first holds its lock.
	if out, code := w.walbox(nil, "replay"); code != 1 || !strings.Contains(out, "running in another walbox replay") {
		t.Errorf("a second run of the running replay exited %d; want 1, refused:\n%s", code, out)
	}
	p.Kill()
	if code := p.Wait(time.Minute); code != -1 {
		t.Fatalf("walbox replay exited %d, not by the kill:\n%s", code, testenv.Tail(p.Output(), 20))
	}
	before := w.replaySent()
	if before >= int64(rows) {
		t.Fatalf("the killed replay had recorded %d of %d rows: the kill came too late to test a resume", before, rows)
	}
	t.Logf("killed with %d of %d rows recorded as confirmed", before, rows)

	out, code := w.walbox(nil, "replay", "--rate=0")
	if code != 0 || !strings.Contains(out, "resumed") {
		t.Fatalf("walbox replay run again exited %d; want 0 and a resume:\n%s", code, out)
	}
	if want := itoa(rows) + " rows of " + itoa(rows) + " matched were sent"; !strings.Contains(out, want) {
		t.Errorf("walbox replay's last line does not say %q:\n%s", want, out)
	}
	if n := w.replaySent(); n != 0 {
		t.Errorf("walbox_replays still holds the finished replay (%d rows sent)", n)
	}
	got := map[string]int{}
	var sample amqp.Delivery
	w.eachInQueue(w.queue, func(d amqp.Delivery) {
		got[d.MessageId]++
		sample = d
	})
	w.checkEveryMatchedRow(got, "TRUE")
	dups := 0
	for _, n := range got {
		dups += n - 1
	}
	t.Logf("%d rows, %d deliveries (%d sent again after the kill)", len(got), len(got)+dups, dups)
	if sample.AppId != "walbox" || sample.ContentType != "application/json" || sample.Headers["aggregate_type"] != "order" {
		t.Errorf("a replayed message: app id %q, content type %q, headers %v; want the relay's properties",
			sample.AppId, sample.ContentType, sample.Headers)
	}
	if after := w.slotLSN(); after != slot {
		t.Errorf("the slot moved from %s to %s during the replay", slot, after)
	}
}

// Beside a running relay, each filter chooses its rows and only those; a replayed message is
// the relay's, property for property, with the same id. The relay goes on relaying meanwhile.
func TestReplayFiltersBesideARunningRelay(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	w.startRelay()
	w.exec(`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload, headers, created_at)
		SELECT t, (i % 5)::text, t || '.' || e, jsonb_build_object('i', i), jsonb_build_object('n', i),
			timestamptz '2026-01-01 10:00Z' + (i % 3) * interval '1 day'
		FROM generate_series(1, 120) i, unnest(ARRAY['order', 'invoice']) t, unnest(ARRAY['created', 'paid']) e`)
	// Rows due in an hour wait in the relay's schedule: replay leaves them to it.
	w.exec(`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload, created_at, deliver_at)
		SELECT 'order', '3', 'order.paid', jsonb_build_object('later', i), timestamptz '2026-01-01 10:00Z', now() + interval '1 hour'
		FROM generate_series(1, 5) i`)
	total := 480
	relayed := w.relayedMessages(total)

	for _, tt := range []struct {
		args  []string
		where string
	}{
		{[]string{"--aggregate-type=order", "--event-type=order.paid", "--since=2026-01-02", "--until=2026-01-03T00:00:00Z"},
			"aggregate_type = 'order' AND event_type = 'order.paid' AND created_at >= '2026-01-02Z' AND created_at < '2026-01-03Z'"},
		{[]string{"--aggregate-id=3"}, "aggregate_id = '3'"},
		{[]string{"--until=2026-01-02"}, "created_at < '2026-01-02Z'"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			w := w.in(t)
			out, code := w.walbox(nil, append([]string{"replay", "--rate=0"}, tt.args...)...)
			if code != 0 {
				t.Fatalf("walbox replay exited %d:\n%s", code, out)
			}
			got := map[string]int{}
			w.eachInQueue(w.queue, func(d amqp.Delivery) {
				got[d.MessageId]++
				r, ok := relayed[d.MessageId]
				if !ok {
					t.Errorf("message %s: the relay never sent it", d.MessageId)
					return
				}
				// The server does not track commit times: replay cannot know the relay's.
				if _, ok := d.Headers[walboxwire.HeaderCommitTime]; ok {
					t.Errorf("message %s: replayed with a commit time the server does not track: %v", d.MessageId, d.Headers)
				}
				delete(r.Headers, walboxwire.HeaderCommitTime)
				if !sameMessage(r, d) {
					t.Errorf("message %s: replayed %+v\nwant the relay's %+v", d.MessageId, d, r)
				}
			})
			n := w.checkEveryMatchedRow(got, tt.where+" AND deliver_at IS NULL")
			if n == 0 || n == total {
				t.Errorf("the filter matches %d of %d rows: it tests nothing", n, total)
			}
		})
	}
	if st := w.relays[0].state(); st != "streaming" {
		t.Errorf("the relay is %q after the replays, want streaming", st)
	}
}

// On a server that tracks commit times, --since compares them, not created_at, and a replayed
// message carries its commit time as the relay sent it.
func TestReplayByCommitTime(t *testing.T) {
	heavy(t)
	pg := testenv.StartPostgres(t, testenv.WithSetting("track_commit_timestamp", "on"))
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	w.startRelay()
	insert := `INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
		SELECT 'order', i::text, 'order.created', jsonb_build_object('i', i), timestamptz '2020-01-01Z'
		FROM generate_series(1, 30) i`
	w.exec(insert)
	var mark time.Time
	if err := w.conn.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&mark); err != nil {
		t.Fatal(err)
	}
	w.exec(insert)
	relayed := w.relayedMessages(60)
	out, code := w.walbox(nil, "replay", "--rate=0", "--since="+mark.UTC().Format(time.RFC3339Nano))
	if code != 0 || !strings.Contains(out, "commit time") {
		t.Fatalf("walbox replay exited %d; want 0, comparing commit times:\n%s", code, out)
	}
	got := map[string]int{}
	w.eachInQueue(w.queue, func(d amqp.Delivery) {
		got[d.MessageId]++
		if r := relayed[d.MessageId]; !sameMessage(r, d) || d.Headers[walboxwire.HeaderCommitTime] == nil {
			t.Errorf("message %s: replayed %+v\nwant the relay's, with its commit time: %+v", d.MessageId, d, r)
		}
	})
	if n := w.checkEveryMatchedRow(got, "pg_xact_commit_timestamp(xmin) >= '"+mark.UTC().Format(time.RFC3339Nano)+"'"); n != 30 {
		t.Errorf("%d rows committed after the mark, want the second 30", n)
	}
}

// relayedMessages takes the relay's deliveries from the queue, by message id, until n are there.
func (w *world) relayedMessages(n int) map[string]amqp.Delivery {
	w.t.Helper()
	relayed := map[string]amqp.Delivery{}
	waitFor(w.t, 2*time.Minute, "the relay's deliveries", func() bool {
		for id, d := range w.drainQueue(w.queue) {
			relayed[id] = d
		}
		return len(relayed) >= n
	})
	return relayed
}

// sameMessage reports whether a and b carry the same message, whoever sent it.
func sameMessage(a, b amqp.Delivery) bool { return reflect.DeepEqual(wire(a), wire(b)) }

// insertRows commits n outbox rows, ten a statement, in transactions of 500.
func (w *world) insertRows(n int) {
	w.t.Helper()
	for done := 0; done < n; done += 500 {
		w.exec(`DO $$ BEGIN FOR s IN 0..49 LOOP
			INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload)
			SELECT 'order', (i % 97)::text, 'order.created', jsonb_build_object('i', i)
			FROM generate_series(` + itoa(done) + ` + s * 10, ` + itoa(done) + ` + s * 10 + 9) i WHERE i < ` + itoa(n) + `;
		END LOOP; END $$`)
	}
}

// texts returns the first column of the query's rows, as text.
func (w *world) texts(query string) []string {
	w.t.Helper()
	rows, err := w.conn.Query(context.Background(), query)
	if err != nil {
		w.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		w.t.Fatal(err)
	}
	return out
}

// replaySent returns the rows walbox_replays records as confirmed, over every replay and table.
func (w *world) replaySent() int64 {
	w.t.Helper()
	var n int64
	if err := w.conn.QueryRow(context.Background(), "SELECT coalesce(sum(sent), 0)::bigint FROM public.walbox_replays").Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	return n
}

// checkEveryMatchedRow fails the test unless got (deliveries by message id) holds every row of the
// outbox where the condition holds, and no other. It returns the number of those rows.
func (w *world) checkEveryMatchedRow(got map[string]int, where string) int {
	w.t.Helper()
	rows, err := w.conn.Query(context.Background(), "SELECT id::text FROM public.outbox WHERE "+where)
	if err != nil {
		w.t.Fatal(err)
	}
	want := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			w.t.Fatal(err)
		}
		want[id] = true
	}
	if err := rows.Err(); err != nil {
		w.t.Fatal(err)
	}
	missing, extra := 0, 0
	for id := range want {
		if got[id] == 0 {
			missing++
		}
	}
	for id := range got {
		if !want[id] {
			extra++
		}
	}
	if missing > 0 || extra > 0 {
		w.t.Errorf("replayed %d distinct messages: %d of the %d matched rows missing, %d not matched", len(got), missing, len(want), extra)
	}
	return len(want)
}

// A mapped legacy table beside the outbox table (examples/legacy-table.yaml): the filters read the
// mapped columns, and a replayed legacy row is the relay's, its bigint id and templated routing
// key included. A table whose ids come from commit positions is refused in one line, exit 2.
func TestReplayMappedLegacyTable(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	w.exec(`CREATE TABLE public.legacy_events (event_id bigserial PRIMARY KEY, kind text NOT NULL, body jsonb NOT NULL,
		entity text, entity_id bigint, meta jsonb, occurred_at timestamptz DEFAULT now())`)
	w.exec(`ALTER PUBLICATION walbox ADD TABLE public.legacy_events`)
	conf, err := filepath.Abs(filepath.Join("..", "..", "examples", "legacy-table.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	w.startRelay("WALBOX_CONFIG=" + conf)
	w.exec(`INSERT INTO public.legacy_events (kind, body, entity, entity_id, meta)
		SELECT k, jsonb_build_object('parcel', i), 'parcel', i % 4, jsonb_build_object('n', i)
		FROM generate_series(1, 40) i, unnest(ARRAY['shipped', 'lost']) k`)
	w.exec(`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', (i % 4)::text, 'shipped', jsonb_build_object('i', i) FROM generate_series(1, 40) i`)
	relayed := w.relayedMessages(120)
	for _, tt := range []struct {
		args          []string
		legacy, table string // the rows of each table the filter matches
	}{
		{[]string{"--aggregate-type=parcel", "--event-type=shipped"}, "entity = 'parcel' AND kind = 'shipped'", "false"},
		{[]string{"--aggregate-id=3"}, "entity_id = 3", "aggregate_id = '3'"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, code := w.in(t).walbox([]string{"WALBOX_CONFIG=" + conf}, append([]string{"replay", "--rate=0"}, tt.args...)...)
			if code != 0 {
				t.Fatalf("walbox replay exited %d:\n%s", code, out)
			}
			got := map[string]int{}
			w.in(t).eachInQueue(w.queue, func(d amqp.Delivery) {
				got[d.MessageId]++
				r := relayed[d.MessageId]
				delete(r.Headers, walboxwire.HeaderCommitTime)
				if !sameMessage(r, d) {
					t.Errorf("message %s: replayed %+v\nwant the relay's %+v", d.MessageId, d, r)
				}
			})
			want := map[string]bool{}
			for _, q := range []string{"SELECT event_id::text FROM public.legacy_events WHERE " + tt.legacy,
				"SELECT id::text FROM public.outbox WHERE " + tt.table} {
				for _, id := range w.in(t).texts(q) {
					want[id] = true
				}
			}
			if len(got) != len(want) || len(want) == 0 {
				t.Errorf("replayed %d distinct messages, want the %d rows matched", len(got), len(want))
			}
			for id := range want {
				if got[id] == 0 {
					t.Errorf("row %s matched, not replayed", id)
				}
			}
		})
	}
	positions := filepath.Join(t.TempDir(), "positions.yaml")
	if err := os.WriteFile(positions, []byte("tables:\n  - table: public.outbox\n    message-id: position\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := w.walbox([]string{"WALBOX_CONFIG=" + positions}, "replay")
	if code != 2 || strings.Count(out, "\n") != 1 || !strings.Contains(out, "commit positions") {
		t.Errorf("walbox replay of a table with position ids exited %d:\n%s\nwant 2 and one line naming commit positions", code, out)
	}
}

// A table split into shards has no publication of its own name: each shard's publication filters
// its rows. Replay sends the rows of every shard, each once, each aggregate's in insert order.
func TestReplayShardedTable(t *testing.T) {
	heavy(t)
	w := newShardedWorld(t, 3)
	w.insertRows(600)
	out, code := w.walbox(nil, "replay", "--rate=0")
	if code != 0 {
		t.Fatalf("walbox replay exited %d:\n%s", code, out)
	}
	got := map[string]int{}
	last := map[any]int{} // the last row number of each aggregate
	w.eachInQueue(w.queue, func(d amqp.Delivery) {
		got[d.MessageId]++
		var body struct{ I int }
		if err := json.Unmarshal(d.Body, &body); err != nil {
			t.Fatal(err)
		}
		agg := d.Headers["aggregate_id"]
		if n, ok := last[agg]; ok && body.I <= n {
			t.Errorf("aggregate %v: row %d after row %d", agg, body.I, n)
		}
		last[agg] = body.I
	})
	w.checkEveryMatchedRow(got, "TRUE")
	for id, n := range got {
		if n != 1 {
			t.Errorf("message %s delivered %d times by one uninterrupted replay", id, n)
		}
	}
}
