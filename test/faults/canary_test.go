package faults_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// The canary is a message like any row: it moves through the window and the slot. With canaries
// every 100 ms among the rows, the relay killed at random moments loses no row and makes none up.
func TestRelayWithCanariesKilledAtRandomMoments(t *testing.T) {
	heavy(t)
	const rounds = 8
	seed := faultSeed()
	t.Logf("seed %d (WALBOX_FAULT_SEED repeats the kill moments and the workload)", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	v := w.startVerifier()
	wr := w.startWriter(checker.WriterConfig{Seed: seed, MaxTx: 40, Pause: 10 * time.Millisecond})
	const canary = "WALBOX_CANARY_INTERVAL=100ms"
	for range rounds {
		r := w.startRelay(canary)
		time.Sleep(500*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond))))
		r.Kill()
	}
	wr.stop()
	w.startRelay(canary)
	w.verdict(wr.Writer, v, 3*time.Minute, rounds, rounds, "canaries")
	if v.Canaries() == 0 {
		t.Error("no canary reached the verifier's queue (bound with #): the test proved nothing about them")
	}
	t.Logf("%d canaries beside the rows", v.Canaries())
}
