package faults_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// The baseline: no fault at all, a writer as fast as it goes. The relay must keep its first
// session throughout (nothing ends it), and so deliver every row exactly once, in order. A
// session that ends here is a fault walbox made up itself.
func TestSteadyStreamWithoutFaults(t *testing.T) {
	heavy(t)
	t.Parallel() // overlaps TestBrokerFaults, which mostly waits
	// The writer stops at a number of rows, or after a time, whichever comes first.
	load := time.Duration(soakInt("WALBOX_SOAK_STEADY_SECONDS", 15, 600)) * time.Second
	steadyStream(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t), load, soakInt("WALBOX_SOAK_STEADY_ROWS", 20_000, 300_000))
}

// steadyStream writes up to rows rows, for up to load, under one relay and checks the verdict and
// the relay's single session.
func steadyStream(t *testing.T, pg *testenv.Postgres, rabbit *testenv.Rabbit, load time.Duration, rows int) {
	w := newWorld(t, pg, rabbit)
	v := w.startVerifier()
	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), load)
	defer cancel()
	cw := w.newWriter(checker.WriterConfig{Seed: 91, MaxTx: 50, MaxRows: rows})
	start := time.Now()
	if err := cw.Run(ctx); err != nil {
		t.Fatal(err)
	}
	wrote := time.Since(start)
	rep := w.verdict(cw, v, 2*time.Minute, 0, 0, "")
	st := mustStatus(t, r)
	t.Logf("SUMMARY %s rows=%d written_in=%v all_delivered_after=%v throughput=%.0f/s sessions=%d (race-built relay, shared CPU)",
		t.Name(), rep.Committed, wrote.Round(time.Millisecond), time.Since(start).Round(time.Millisecond),
		float64(rep.Unique)/time.Since(start).Seconds(), st.Sessions)
	if st.Sessions != 1 || st.LastError != "" || rep.Duplicated != 0 {
		t.Errorf("RELAY BUG (docs/reliability.md, bug 2): without any fault the relay ran %d sessions and delivered %d duplicates; "+
			"last error: %s", st.Sessions, rep.Duplicated, orNone(st.LastError))
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return fmt.Sprintf("%q", s)
}
