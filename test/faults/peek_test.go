package faults_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/test/checker"
)

// keepSlots copies each slot where it is now, so that restoreSlots can put it back there.
func (w *world) keepSlots(slots []string) {
	w.t.Helper()
	for _, s := range slots {
		w.exec(`SELECT pg_catalog.pg_copy_logical_replication_slot($1, $2)`, s, s+"_kept")
	}
}

// restoreSlots puts each slot back where keepSlots found it: its rows since then replay.
func (w *world) restoreSlots(slots []string) {
	w.t.Helper()
	for _, s := range slots {
		w.exec(`SELECT pg_catalog.pg_drop_replication_slot($1)`, s)
		w.exec(`SELECT pg_catalog.pg_copy_logical_replication_slot($1, $2)`, s+"_kept", s)
		w.exec(`SELECT pg_catalog.pg_drop_replication_slot($1)`, s+"_kept")
	}
}

// compared matches stream_anchor's pass after a peek, with the number of rows it compared.
var compared = regexp.MustCompile(`and the (\d+) rows slot (\S+) replays up to it are the stream's`)

// comparedRows returns, per slot, how many rows stream_anchor compared in out.
func comparedRows(out string) map[string]int {
	got := map[string]int{}
	for _, m := range compared.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		got[m[2]] = n
	}
	return got
}

// Two shards' relays store rows, a third of them written through walbox_emit, a row due later and
// canaries every 100 ms in one stream. Each shard's slot is then put back where it was before, so
// the slot replays every row the stream holds: the case of a relay killed before it reported. The
// server is not restored: doctor, status, and recover --dry-run on each shard's slot must pass,
// having compared that shard's rows with the stream. Every slot receives every emitted message and
// canary; a check that took another shard's for its own would call them missing from the stream.
func TestPeekOnShardsSlotsWithEmittedMessagesCanariesAndARowDueLater(t *testing.T) {
	heavy(t)
	const n = 2
	rabbit := testenv.SharedRabbitStream(t)
	w := newShardedWorldOn(t, testenv.SharedPostgres(t), rabbit, n)
	set := shard.Set{Slot: w.slot, Publication: "walbox", N: n}
	slots := []string{set.SlotName(0), set.SlotName(1)}
	name := testenv.UniqueName("events")
	env := []string{"WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name}
	sr := readStream(t, rabbit.StreamURL(), name)
	w.keepSlots(slots)

	wr := w.newWriter(checker.WriterConfig{Seed: 73, Aggregates: 20, Emit: 0.4})
	tx := func(k int) {
		for range k {
			if err := wr.Tx(t.Context(), 5); err != nil {
				t.Fatal(err)
			}
		}
	}
	tx(15)
	// A row due later first: the relay parks it, and the row after it keeps its index.
	w.exec(`INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload, deliver_at)
		VALUES (pg_catalog.gen_random_uuid(), 'o', 'later', 'o.later', '{}', pg_catalog.now() + interval '1 hour');
		INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload)
		VALUES (pg_catalog.gen_random_uuid(), 'o', 'later', 'o.now', '{}')`)
	tx(15)
	wr.Close()
	relays := []*relay{
		w.startShard(0, n, append(env, "WALBOX_CANARY_INTERVAL=100ms")...),
		w.startShard(1, n, append(env, "WALBOX_CANARY_INTERVAL=100ms")...),
	}
	waitFor(t, 2*time.Minute, "every committed row in the stream", func() bool { return len(notInStream(sr, wr.Committed())) == 0 })
	time.Sleep(2 * time.Second) // canaries among them, and after
	for _, r := range relays {
		if code := r.Stop(time.Minute); code != 0 {
			t.Fatalf("walbox run exited %d:\n%s", code, r.Output())
		}
	}
	w.restoreSlots(slots)

	// Doctor exits 1 on a sharded table whatever the stream holds: it checks the base publication,
	// which only the single slot has (docs/scaling.md). Status and recover must exit 0.
	check := func(args []string, want []string, zero bool) {
		t.Helper()
		out, code := w.walbox(env, args...)
		t.Logf("walbox %s exited %d:\n%s", strings.Join(args, " "), code, out)
		got := comparedRows(out)
		for _, s := range want {
			if got[s] == 0 {
				t.Errorf("walbox %s: stream_anchor compared no row of slot %s with the stream; want its rows, all the stream's",
					strings.Join(args, " "), s)
			}
		}
		if (zero && code != 0) || strings.Contains(out, "WAL does not have") || strings.Contains(out, "cannot check the stream") || strings.Contains(out, "not compared") {
			t.Errorf("walbox %s exited %d on a server that was not restored; want no alarm and every row compared", strings.Join(args, " "), code)
		}
	}
	check([]string{"doctor"}, slots, false)
	check([]string{"status"}, slots, true)
	for k, s := range slots {
		check([]string{"recover", "--dry-run", "--slot", s, "--publication", set.PublicationName(k)}, []string{s}, true)
	}
}

// A data directory restored under two shards' relays into one stream, a third of the rows written
// through walbox_emit. The restored server writes past each relay's last row. Each shard's relay
// stops with the restore's cause, and stores nothing; status, and recover --dry-run on each
// shard's slot, exit 1 with it; doctor names it for each slot.
func TestRestoredDatabaseUnderShardsIntoAStream(t *testing.T) {
	heavy(t)
	const n = 2
	pg := testenv.StartPostgres(t)
	testenv.RequireOwn(t, pg)
	rabbit := testenv.SharedRabbitStream(t)
	w := newShardedWorldOn(t, pg, rabbit, n)
	set := shard.Set{Slot: w.slot, Publication: "walbox", N: n}
	name := testenv.UniqueName("events")
	env := []string{"WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name}
	sr := readStream(t, rabbit.StreamURL(), name)
	var committed []checker.Row
	write := func(seed uint64, txs int) {
		t.Helper()
		wr := w.newWriter(checker.WriterConfig{Seed: seed, Name: fmt.Sprintf("agg%d", seed), Aggregates: 20, Emit: 0.3})
		for range txs {
			if err := wr.Tx(t.Context(), 5); err != nil {
				t.Fatal(err)
			}
		}
		wr.Close()
		committed = append(committed, wr.Committed()...)
	}
	relayAll := func() {
		t.Helper()
		rs := []*relay{w.startShard(0, n, env...), w.startShard(1, n, env...)}
		waitFor(t, 2*time.Minute, "every row in the stream", func() bool { return len(notInStream(sr, committed)) == 0 })
		time.Sleep(time.Second) // the slots catch up with the confirms
		for _, r := range rs {
			if code := r.Stop(time.Minute); code != 0 {
				t.Fatalf("walbox run exited %d:\n%s", code, r.Output())
			}
		}
	}
	write(51, 20)
	relayAll()
	restoreFault(t, pg, func() {
		write(52, 20)
		relayAll()
	})
	write(53, 40)
	stored := sr.count()

	cause := "the stream holds rows this server's WAL does not have"
	for k := range n {
		r := w.startShard(k, n, env...)
		code := r.Wait(2 * time.Minute)
		if out := r.Output(); code == 0 || !strings.Contains(out, cause) || !strings.Contains(out, "new stream") {
			t.Errorf("shard %d's relay exited %d; want a stop naming the restore and the way out:\n%s", k, code, out)
		}
	}
	if got := sr.count(); got != stored {
		t.Errorf("the stream went from %d to %d messages on the restored server", stored, got)
	}
	out, code := w.walbox(env, "doctor")
	if code == 0 || strings.Count(out, cause) < n {
		t.Errorf("walbox doctor exited %d; want the restore named for each shard's slot:\n%s", code, out)
	}
	out, code = w.walbox(env, "status")
	if code == 0 || !strings.Contains(out, cause) {
		t.Errorf("walbox status exited %d; want 1 and the restore's cause:\n%s", code, out)
	}
	for k := range n {
		out, code := w.walbox(env, "recover", "--dry-run", "--slot", set.SlotName(k), "--publication", set.PublicationName(k))
		if code == 0 || !strings.Contains(out, cause) {
			t.Errorf("walbox recover --dry-run on shard %d exited %d; want 1 and the restore's cause:\n%s", k, code, out)
		}
	}
}
