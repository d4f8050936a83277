package faults_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// soakKillRound is the number of kills in one round of TestKillPointsSoak; the checker judges
// each round.
const soakKillRound = 25

// soakMaxHit is the highest hit TestKillPointsSoak draws for point.
func soakMaxHit(point string) int {
	if point == "stream.stored" {
		return 3 // the replay after a kill may be short
	}
	return 30
}

// In the soak the relay is killed about 2,000 times (WALBOX_SOAK_KILLS) at kill points and hits
// drawn at random (WALBOX_FAULT_SEED repeats them), in four modes side by side: one slot, three
// lanes, two shards (a shard drawn for each kill) and a stream. A writer commits table rows and
// emitted messages mixed. Each round of 25 kills ends with a relay without kill points draining,
// and the checker's verdict: nothing lost, phantom or out of order; in the stream, each row
// exactly once and nothing rolled back. A relay that does not reach its hit within 20 s (a
// replay too short, say) is killed from outside, and counted as a kill at a random moment.
func TestKillPointsSoak(t *testing.T) {
	heavy(t)
	if !soaking() {
		t.Skip("soak only (make soak): kills walbox about 2,000 times at kill points")
	}
	seed := faultSeed()
	modes := []struct {
		name  string
		setup func(t *testing.T) soakRound
	}{
		{"one slot", func(*testing.T) soakRound { return soakRelayRound() }},
		{"three lanes", func(*testing.T) soakRound { return soakRelayRound("WALBOX_LANES=3") }},
		{"two shards", func(*testing.T) soakRound { return soakShardsRound }},
		{"stream", soakStreamRound},
	}
	rounds := max(1, soakInt("WALBOX_SOAK_KILLS", 2000, 2000)/(len(modes)*soakKillRound))
	t.Logf("seed %d: %d rounds of %d kills in each of %d modes", seed, rounds, soakKillRound, len(modes))
	for i, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			round := m.setup(t)
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for r := range rounds {
				t.Run(fmt.Sprintf("round_%02d", r+1), func(t *testing.T) { round(t, rng, seed+uint64(r)) })
			}
		})
	}
}

// faultSeed is WALBOX_FAULT_SEED if set, which repeats a run's kills and workload, else a new
// seed.
func faultSeed() uint64 {
	if s, err := strconv.ParseUint(os.Getenv("WALBOX_FAULT_SEED"), 10, 64); err == nil {
		return s
	}
	return uint64(time.Now().UnixNano())
}

// soakRound is one round of a mode: soakKillRound kills drawn from rng, then the verdict.
type soakRound func(t *testing.T, rng *rand.Rand, seed uint64)

// soakWriter is the writer of a round: rows and emitted messages mixed, across 40 aggregates.
func soakWriter(seed uint64) checker.WriterConfig {
	return checker.WriterConfig{Seed: seed, Aggregates: 40, MaxTx: 10, Pause: 10 * time.Millisecond, Emit: 0.3}
}

// soakRelayRound kills a relay with the settings extra.
func soakRelayRound(extra ...string) soakRound {
	return func(t *testing.T, rng *rand.Rand, seed uint64) {
		w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
		v := w.startVerifier()
		wr := w.startWriter(soakWriter(seed))
		hits := w.soakKills(rng, relayPoints, func() []string { return extra })
		wr.stop()
		w.startRelay(extra...)
		w.verdict(wr.Writer, v, 3*time.Minute, soakKillRound, hits, "")
	}
}

// soakShardsRound kills the relays of two shards, the shard drawn for each kill, into one queue.
func soakShardsRound(t *testing.T, rng *rand.Rand, seed uint64) {
	const n = 2
	w := newShardedWorld(t, n)
	v := w.startVerifier()
	wr := w.startWriter(soakWriter(seed))
	hits := w.soakKills(rng, relayPoints, func() []string {
		return []string{"WALBOX_SHARDS=" + itoa(n), "WALBOX_SHARD=" + itoa(rng.IntN(n))}
	})
	wr.stop()
	for k := range n {
		w.startShard(k, n)
	}
	w.verdict(wr.Writer, v, 3*time.Minute, soakKillRound, hits, "shards=2")
}

// soakStreamRound starts a stream node for the mode; each round kills a stream relay, into a
// stream of its own, at the relay's points and the stream publisher's.
func soakStreamRound(t *testing.T) soakRound {
	rabbit := testenv.StartRabbitStream(t)
	return func(t *testing.T, rng *rand.Rand, seed uint64) {
		w := newWorld(t, testenv.SharedPostgres(t), rabbit)
		env, sr := newStream(t, rabbit)
		cfg := soakWriter(seed)
		cfg.Rollback = 0.1 // the stream must hold nothing rolled back
		wr := w.startWriter(cfg)
		w.soakKills(rng, slices.Concat(relayPoints, streamPoints), func() []string { return env })
		w.drainStream(wr, sr, env)
	}
}

// soakKills kills soakKillRound relays, each at a point of points and a hit drawn from rng, with
// the settings extra() each, and returns how many the kill point ended.
func (w *world) soakKills(rng *rand.Rand, points []string, extra func() []string) int {
	hits := 0
	for range soakKillRound {
		point := points[rng.IntN(len(points))]
		if w.killRunMaybe(point, 1+rng.IntN(soakMaxHit(point)), extra()...) {
			hits++
		}
	}
	return hits
}

// killRunMaybe is killRunAt for the soak: a relay that does not reach its hit within 20 s is
// SIGKILLed from outside and counted as a kill at a random moment. It reports whether the kill
// point ended the relay.
func (w *world) killRunMaybe(point string, hit int, extra ...string) bool {
	w.t.Helper()
	p := w.startKillRun(point, hit, extra...)
	start := time.Now()
	for !p.Exited() && time.Since(start) < 20*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	if !p.Exited() {
		p.Kill()
		soakKill(randomKill)
		return false
	}
	w.checkKilled(point, hit, p.ExitCode(), p.Output())
	soakKill(point)
	return true
}

// killRounds runs body once, or in the soak rounds times (WALBOX_SOAK_KILL_ROUNDS), each as
// the subtest round_N.
func killRounds(t *testing.T, rounds int, body func(t *testing.T)) {
	n := soakInt("WALBOX_SOAK_KILL_ROUNDS", 1, rounds)
	if n == 1 {
		body(t)
		return
	}
	for i := range n {
		t.Run(fmt.Sprintf("round_%02d", i+1), body)
	}
}
