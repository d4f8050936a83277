package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/test/checker"
)

// newShardedWorld is newWorld with `walbox migrate --shards n` instead of a single slot, on the
// shared servers.
func newShardedWorld(t *testing.T, n int) *world {
	t.Helper()
	return newShardedWorldOn(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t), n)
}

// newShardedWorldOn is newShardedWorld on pg and rabbit.
func newShardedWorldOn(t *testing.T, pg *testenv.Postgres, rabbit *testenv.Rabbit, n int) *world {
	t.Helper()
	db := pg.NewDatabase(t)
	w := &world{t: t, pg: pg, rabbit: rabbit, db: db, relayDB: db, relayMQ: rabbit.URL(),
		slot: testenv.UniqueName("slot"), exchange: testenv.UniqueName("ex"), queue: testenv.UniqueName("q"), binding: "#"}
	w.conn = pg.Conn(t, db)
	if out, code := w.walbox(nil, "migrate", "--shards", itoa(n)); code != 0 {
		t.Fatalf("walbox migrate --shards %d exited %d:\n%s", n, code, out)
	}
	w.declare()
	return w
}

// twoShardsUnderLoad starts two shards' relays, a verifier of their queue and a writer of a third
// of its rows through walbox_emit, which every slot of every set receives.
func twoShardsUnderLoad(t *testing.T, seed uint64) (*world, *checker.Verifier, *writer, []*relay) {
	t.Helper()
	w := newShardedWorld(t, 2)
	v := w.startVerifier()
	wr := w.startWriter(checker.WriterConfig{Seed: seed, Aggregates: 40, MaxTx: 20, Pause: 5 * time.Millisecond, Emit: 0.3})
	return w, v, wr, []*relay{w.startShard(0, 2), w.startShard(1, 2)}
}

// startShard starts the relay of shard k of n.
func (w *world) startShard(k, n int, extra ...string) *relay {
	return w.startRelay(append([]string{"WALBOX_SHARDS=" + itoa(n), "WALBOX_SHARD=" + itoa(k)}, extra...)...)
}

// Three shards, three relays, each SIGKILLed at random moments while a writer commits across
// many aggregates. Each relay publishes to an exchange and queue of its own, so every delivery
// says which relay sent it: each queue must hold exactly the committed rows of its shard (by the
// hash of the aggregate id), none lost, none from another shard (a phantom there), and each
// aggregate's first deliveries in commit order.
func TestShardsKilledAtRandomMoments(t *testing.T) {
	heavy(t)
	const n = 3
	rounds := soakInt("WALBOX_SOAK_ROUNDS", 12, 120)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d rounds", seed, rounds)
	shardsKilledAtRandomMoments(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t), n, seed, rounds)
}

// shardsKilledAtRandomMoments runs n shards, each in its own queue, and kills one of them rounds
// times, at moments drawn from seed.
func shardsKilledAtRandomMoments(t *testing.T, pg *testenv.Postgres, rabbit *testenv.Rabbit, n int, seed uint64, rounds int) {
	rng := rand.New(rand.NewPCG(seed, 3))
	w := newShardedWorldOn(t, pg, rabbit, n)
	shards := make([]*world, n)
	verifiers := make([]*checker.Verifier, n)
	relays := make([]*relay, n)
	for k := range n {
		shards[k] = w.in(t)
		shards[k].exchange, shards[k].queue = fmt.Sprintf("%s_s%d", w.exchange, k), fmt.Sprintf("%s_s%d", w.queue, k)
		shards[k].declare()
		verifiers[k] = shards[k].startVerifier()
		relays[k] = shards[k].startShard(k, n)
	}
	// A third of the rows go through walbox_emit: every slot receives every logical decoding
	// message, whatever its publication's row filter, so each relay must keep to its shard's.
	wr := w.startWriter(checker.WriterConfig{Seed: seed, Aggregates: 60, MaxTx: 30, Pause: 10 * time.Millisecond, Emit: 0.3})
	for i := range rounds {
		k := rng.IntN(n)
		time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
		relays[k].Kill()
		time.Sleep(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
		relays[k] = shards[k].startShard(k, n)
		if i%4 == 3 {
			t.Logf("round %d: %d committed", i+1, wr.Stats().Rows)
		}
	}
	wr.stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := wr.Flush(ctx); err != nil {
		t.Errorf("writer: %v", err)
	}
	perShard := make([][]checker.Row, n)
	for _, r := range wr.Committed() {
		k := shard.Of(r.Aggregate, n)
		perShard[k] = append(perShard[k], r)
	}
	for k := range n {
		rep := verifiers[k].Await(context.Background(), perShard[k], 3*time.Minute)
		rep.Unresolved = wr.Stats().Unresolved
		t.Logf("SUMMARY %s shard %d of %d: %s", t.Name(), k, n, rep)
		if err := rep.Err(); err != nil {
			t.Errorf("shard %d: %v", k, err)
		}
		if rep.Committed == 0 || rep.Aggregates < 5 {
			t.Errorf("shard %d: %d rows of %d aggregates committed: the test proved little", k, rep.Committed, rep.Aggregates)
		}
	}
}

// Resharding from 2 to 3 under load, by the documented procedure: walbox reshard creates the new
// set beside the old one and waits until the old slots passed the cut; the new relays start; the
// old relays stop; walbox reshard --retire drops the old set. Every relay publishes to the same
// queue: nothing may be lost, and first deliveries keep each aggregate's commit order across the
// handover. A third of the rows are written through walbox_emit, which every slot of both sets
// receives: the relays of each set pick theirs by the set's count.
func TestReshardUnderLoad(t *testing.T) {
	heavy(t)
	w, v, wr, old := twoShardsUnderLoad(t, 11)
	w.progress(v, 500, time.Minute)

	// An old relay that cannot move holds the reshard: its slot stays before the cut, and
	// retiring is refused, naming it.
	old[0].Signal(syscall.SIGSTOP)
	if out, code := w.walbox(nil, "reshard", "--shards", "3"); code != 0 || !strings.Contains(out, "not yet: "+w.slot+"_s0of2") {
		t.Fatalf("walbox reshard --shards 3 exited %d:\n%s", code, out)
	}
	if out, code := w.walbox(nil, "reshard", "--shards", "3", "--retire"); code == 0 || !strings.Contains(out, w.slot+"_s0of2 is at") ||
		!strings.Contains(out, "before the cut") {
		t.Fatalf("retire with an old slot before the cut exited %d:\n%s", code, out)
	}
	old[0].Signal(syscall.SIGCONT)
	out, code := w.walbox(nil, "reshard", "--shards", "3", "--wait", "90s")
	t.Logf("walbox reshard --shards 3:\n%s", out)
	if code != 0 {
		t.Fatalf("walbox reshard exited %d", code)
	}
	// Retiring now is refused: the old relays still stream.
	if out, code := w.walbox(nil, "reshard", "--shards", "3", "--retire"); code == 0 || !strings.Contains(out, "stop its relay") {
		t.Fatalf("retire with the old relays streaming exited %d:\n%s", code, out)
	}
	for k := range 3 {
		w.startShard(k, 3)
	}
	w.progress(v, 500, time.Minute)
	for _, r := range old {
		if code := r.Stop(30 * time.Second); code != 0 { // confirm what the broker confirmed, and exit
			t.Errorf("old relay exited %d", code)
		}
	}
	if out, code := w.walbox(nil, "reshard", "--shards", "3", "--retire"); code != 0 {
		t.Fatalf("walbox reshard --retire exited %d:\n%s", code, out)
	} else {
		t.Logf("walbox reshard --retire:\n%s", out)
	}
	w.progress(v, 500, time.Minute)
	wr.stop()

	out, code = w.walbox(nil, "status", "--json")
	var st struct {
		Sets []struct {
			Shards int    `json:"shards"`
			Role   string `json:"role"`
		} `json:"shard_sets"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || len(st.Sets) != 1 || st.Sets[0].Shards != 3 || st.Sets[0].Role != "" {
		t.Errorf("walbox status after the reshard exited %d with %+v (%v):\n%s", code, st, err, out)
	}
	// The registry holds the new slots, each with the coverage of its own publication, and none
	// of the retired ones.
	rows, err := w.conn.Query(context.Background(), `SELECT slot_name, coalesce(coverage, '') FROM walbox_slots ORDER BY slot_name`)
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]string{}
	for rows.Next() {
		var name, coverage string
		if err := rows.Scan(&name, &coverage); err != nil {
			t.Fatal(err)
		}
		recorded[name] = coverage
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	to := shard.Set{Slot: w.slot, Publication: "walbox", N: 3}
	coverages := map[string]bool{}
	for k := range to.N {
		c, ok := recorded[to.SlotName(k)]
		if !ok || c == "" {
			t.Errorf("slot %s: recorded %v, coverage %q; want a record with its coverage", to.SlotName(k), ok, c)
		}
		coverages[c] = true
	}
	if len(recorded) != to.N || len(coverages) != to.N {
		t.Errorf("walbox_slots after the reshard = %v; want exactly the %d new slots, each with its own coverage", recorded, to.N)
	}
	w.verdict(wr.Writer, v, 3*time.Minute, 1, 0, "")
}

// Settings that do not match what walbox migrate created are refused, naming both; so is a
// relay whose publication's row filter is changed under it.
func TestMismatchedShardsRefused(t *testing.T) {
	heavy(t)
	w := newShardedWorld(t, 3)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"migrate", "--shards", "2"}, []string{"--shards 2", "3 shards"}},
		{[]string{"migrate"}, []string{"one slot", "3 shards"}},
		{[]string{"run", "--shards", "2", "--shard", "0"}, []string{"--shards 2", "walbox_s0of2", "3 shards"}},
		{[]string{"run", "--shards", "4", "--shard", "3"}, []string{"--shards 4", "3 shards"}},
		{[]string{"run", "--shard", "3"}, []string{"--shard 3", "0 to 2"}},
		{[]string{"run"}, []string{"--shard", "3 shards"}},
	} {
		out, code := w.walbox(nil, tc.args...)
		if code != 2 || !containsAll(out, tc.want) {
			t.Errorf("walbox %v exited %d, want 2 naming %v:\n%s", tc.args, code, tc.want, out)
		}
	}
	// The filter changed under a streaming relay: it stops instead of relaying the wrong rows.
	r := w.startShard(1, 3)
	r.waitState("streaming", time.Minute)
	set := shard.Set{Slot: w.slot, Publication: "walbox", N: 3}
	w.pg.Exec(t, w.db, "ALTER PUBLICATION walbox_s1of3 SET TABLE outbox WHERE "+set.Filter(0))
	if code := r.Wait(time.Minute); code != 1 || !strings.Contains(r.Output(), "selects shard 0 of 3") {
		t.Errorf("relay exited %d after its filter changed:\n%s", code, testenv.Tail(r.Output(), 20))
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// A shard's slot is dropped while a writer commits: that shard's relay refuses to go on, walbox
// recover given the shard's slot and publication republishes the gap from the table and replaces
// the slot, and the shard's relay continues from the new slot. Both relays publish to one queue:
// nothing committed is lost, whichever shard it belongs to.
func TestRecoverShardSlot(t *testing.T) {
	heavy(t)
	const n = 2
	w := newShardedWorld(t, n)
	set := shard.Set{Slot: w.slot, Publication: "walbox", N: n}
	v := w.startVerifier()
	relays := []*relay{w.startShard(0, n), w.startShard(1, n)}
	wr := w.startWriter(checker.WriterConfig{Seed: 17, Aggregates: 40, MaxTx: 10, Pause: 10 * time.Millisecond})
	w.progress(v, 200, time.Minute)

	s0 := w.in(t)
	s0.slot = set.SlotName(0)
	s0.dropSlot()
	w.expectRefusal(relays[0], "will not recreate")
	time.Sleep(500 * time.Millisecond) // the gap grows

	args := []string{"recover", "--slot", set.SlotName(0), "--publication", set.PublicationName(0)}
	out, code := w.walbox(nil, args...)
	t.Logf("walbox %v:\n%s", args, out)
	if code != 0 || !republished.MatchString(out) {
		t.Fatalf("walbox %v exited %d", args, code)
	}
	w.startShard(0, n)
	w.progress(v, 200, time.Minute)
	wr.stop()
	w.verdict(wr.Writer, v, 2*time.Minute, 1, 1, "")
}

// A stop walbox run records on one shard's slot names the way out for that slot (walbox recover
// takes a shard's slot and publication by name), and walbox status sees it, as for a single slot:
// it exits non-zero, naming the slot and that command. The command gets the shard going again.
func TestShardStopNamesItsWayOut(t *testing.T) {
	heavy(t)
	const n = 2
	w := newShardedWorld(t, n)
	set := shard.Set{Slot: w.slot, Publication: "walbox", N: n}
	relays := []*relay{w.startShard(0, n), w.startShard(1, n)}
	for _, r := range relays {
		r.waitState("streaming", time.Minute)
	}
	w.exec("DROP PUBLICATION " + set.PublicationName(1))
	for range 5 { // rows the dropped publication did not decode, which recover republishes
		w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
			VALUES ('order', gen_random_uuid()::text, 'order.created', '{}')`)
	}
	w.expectNamedStop(relays[1], "publication")
	way := "walbox recover --force --slot " + set.SlotName(1) + " --publication " + set.PublicationName(1)
	if !strings.Contains(relays[1].Output(), way) {
		t.Errorf("walbox run of shard 1 does not name %q:\n%s", way, testenv.Tail(relays[1].Output(), 3))
	}
	if out, code := w.walbox(nil, "migrate", "--shards", itoa(n)); code != 0 {
		t.Fatalf("walbox migrate --shards %d exited %d:\n%s", n, code, out)
	}
	if out, code := w.walbox(nil, "status"); code == 0 || !strings.Contains(out, "stopped on slot "+set.SlotName(1)) ||
		!strings.Contains(out, way) {
		t.Errorf("walbox status exited %d with shard slot %s stopped; want non-zero, the slot and %q:\n%s",
			code, set.SlotName(1), way, out)
	}
	if out, code := w.walbox(nil, strings.Fields(way)[1:]...); code != 0 || !republished.MatchString(out) {
		t.Fatalf("%s exited %d:\n%s", way, code, out)
	}
	w.startShard(1, n).waitState("streaming", time.Minute)
	if out, code := w.walbox(nil, "status"); code != 0 {
		t.Errorf("walbox status exited %d after %s:\n%s", code, way, out)
	}
}
