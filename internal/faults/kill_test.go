package faults_test

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/checker"
	"github.com/walbox/walbox/internal/testenv"
)

// The relay is SIGKILLed at random moments, round after round, while a writer commits: at start
// up, mid-transaction, with confirms outstanding, while the previous incarnation's walsender still
// holds the slot. Nothing committed may be lost, nothing invented, and first deliveries keep
// commit order.
func TestRelayKilledAtRandomMoments(t *testing.T) {
	heavy(t)
	t.Parallel() // overlaps TestBrokerFaults, which mostly waits
	rounds := soakInt("WALBOX_SOAK_ROUNDS", 20, 200)
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("WALBOX_FAULT_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (WALBOX_FAULT_SEED repeats the kill moments and the workload), %d rounds", seed, rounds)
	rng := rand.New(rand.NewPCG(seed, 1))

	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	v := w.startVerifier()
	wr := w.startWriter(checker.WriterConfig{Seed: seed, MaxTx: 40, Pause: 10 * time.Millisecond})
	start := time.Now()
	for i := range rounds {
		r := w.startRelay()
		// Up to 1.5 s: some kills land before the first session, most in the stream.
		time.Sleep(time.Duration(rng.Int64N(int64(1500 * time.Millisecond))))
		r.kill()
		if i%5 == 4 {
			t.Logf("round %d: %d committed, %d delivered so far", i+1, wr.Stats().Rows, v.Count())
		}
	}
	wr.stop()
	w.startRelay()
	w.verdict(wr.Writer, v, 3*time.Minute, rounds, rounds,
		"kills_over="+time.Since(start).Round(time.Second).String())
}
