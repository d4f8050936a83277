package faults_test

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// The relay is SIGKILLed at random moments, round after round, while a writer commits: at start
// up, mid-transaction, with confirms outstanding, while the previous incarnation's walsender still
// holds the slot. Nothing committed may be lost, nothing invented, and first deliveries keep
// commit order.
func TestRelayKilledAtRandomMoments(t *testing.T) {
	heavy(t)
	t.Parallel() // overlaps TestBrokerFaults, which mostly waits
	rounds := soakInt("WALBOX_SOAK_ROUNDS", 20, 200)
	seed := faultSeed()
	t.Logf("seed %d (WALBOX_FAULT_SEED repeats the kill moments and the workload), %d rounds", seed, rounds)
	relayKilledAtRandomMoments(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t), seed, rounds)
}

// relayKilledAtRandomMoments kills the relay rounds times, at moments drawn from seed.
func relayKilledAtRandomMoments(t *testing.T, pg *testenv.Postgres, rabbit *testenv.Rabbit, seed uint64, rounds int) {
	rng := rand.New(rand.NewPCG(seed, 1))
	w := newWorld(t, pg, rabbit)
	v := w.startVerifier()
	wr := w.startWriter(checker.WriterConfig{Seed: seed, MaxTx: 40, Pause: 10 * time.Millisecond})
	start := time.Now()
	for i := range rounds {
		r := w.startRelay()
		// Up to 1.5 s: some kills land before the first session, most in the stream.
		time.Sleep(time.Duration(rng.Int64N(int64(1500 * time.Millisecond))))
		r.Kill()
		soakKill(randomKill)
		if i%5 == 4 {
			t.Logf("round %d: %d committed, %d delivered so far", i+1, wr.Stats().Rows, v.Count())
		}
	}
	wr.stop()
	w.startRelay()
	w.verdict(wr.Writer, v, 3*time.Minute, rounds, rounds,
		"kills_over="+time.Since(start).Round(time.Second).String())
}

// The relay is SIGKILLed while it drains a backlog, a few times over, with the default status
// interval (1 s). Everything published after the slot's reported position is sent again by the
// next process: the window of unconfirmed messages plus whatever was confirmed but not reported
// yet. walbox reports a moving position within about 100 ms, so a kill costs little more than the
// window; reported once a second it cost up to a second of traffic more.
func TestDuplicatesAfterKillWhileDraining(t *testing.T) {
	heavy(t)
	const backlog, kills, window = 30000, 3, 1024
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	v := w.startVerifier()
	cw := w.newWriter(checker.WriterConfig{Seed: 47})
	for range backlog / 500 {
		if err := cw.Tx(t.Context(), 500); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"WALBOX_STATUS_INTERVAL=1s", "WALBOX_WINDOW=" + strconv.Itoa(window)}
	var rates []float64
	for i := range kills {
		r := w.startRelay(env...)
		r.waitState("streaming", time.Minute)
		from, start := v.Count(), time.Now()
		waitDelivered(t, v, from+4000, time.Minute)
		rates = append(rates, float64(v.Count()-from)/time.Since(start).Seconds())
		r.Kill()
		t.Logf("kill %d after %d deliveries at %.0f msg/s", i+1, v.Count(), rates[i])
	}
	w.startRelay(env...)
	rep := w.verdict(cw, v, 3*time.Minute, kills, kills, "")
	perKill := float64(rep.Duplicated) / kills
	slowest := slices.Min(rates)
	t.Logf("DUPLICATES per kill while draining: %.0f (window %d; %.0f msg/s, so 100 ms is %.0f messages)",
		perKill, window, slowest, slowest/10)
	// A bound in messages, from the rate this run measured: the window, plus half a second of
	// traffic for the reporting delay and the kill landing between two reports.
	if limit := float64(window) + slowest/2; perKill > limit {
		t.Errorf("%.0f duplicates per kill, more than the window plus half a second of traffic (%.0f)", perKill, limit)
	}
}
