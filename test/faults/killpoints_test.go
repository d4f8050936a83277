package faults_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// killAt is the hit of each point at which the relay kills itself: past the first, so that the
// relay is streaming and, for the report points, has moved the slot before.
const killAt = 3

// The relay, built with kill points, kills itself at each named boundary in turn while a writer
// commits transactions of up to 40 rows: a Begin decoded, between two rows of a transaction, a
// publish not yet confirmed, a confirm not yet recorded, a record not yet reported, a report
// sent, a keepalive's step. Each point must be hit: the process dies by SIGKILL after saying which
// point killed it. The next relay starts from the slot as it was; at the end a relay built
// without kill points drains, and nothing may be lost, invented or delivered out of order.
func TestRelayKilledAtEveryPoint(t *testing.T) {
	heavy(t)
	bin := testenv.Build(t, "cmd/walbox", "-race", "-tags=killpoints")
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	v := w.startVerifier()
	wr := w.startWriter(checker.WriterConfig{Seed: 36, MaxTx: 40, Pause: 10 * time.Millisecond})
	start := time.Now()
	for _, point := range killpoint.Points {
		t.Run(point, func(t *testing.T) {
			sw := w.in(t)
			from := v.Count()
			cmd := exec.Command(bin, "run")
			cmd.Env = sw.env([]string{"WALBOX_LISTEN=" + testenv.FreeAddr(t), killpoint.Env + "=" + point + ":" + itoa(killAt)})
			p := testenv.Start(t, cmd)
			if code := p.Wait(2 * time.Minute); code != -1 {
				t.Fatalf("walbox exited %d, not by the kill at %s:\n%s", code, point, testenv.Tail(p.Output(), 40))
			}
			if want := "walbox: kill point " + point + " hit " + itoa(killAt) + ": SIGKILL"; !strings.Contains(p.Output(), want) {
				t.Fatalf("walbox died without %q:\n%s", want, testenv.Tail(p.Output(), 40))
			}
			t.Logf("killed at %s after %d deliveries (%d in this run)", point, v.Count(), v.Count()-from)
		})
	}
	wr.stop()
	w.startRelay()
	w.verdict(wr.Writer, v, 3*time.Minute, len(killpoint.Points), len(killpoint.Points),
		"kills_over="+time.Since(start).Round(time.Second).String())
}
