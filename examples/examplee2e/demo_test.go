package examplee2e_test

import (
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

var summaryLine = regexp.MustCompile(`demo: done: placed (\d+), failed (\d+), published (\d+), notified (\d+), duplicates (\d+), lag (-?\d+)`)

// The demo starts its own servers and services, places orders for a few seconds, and every
// order is notified exactly once before it stops everything.
func TestDemoNotifiesEveryOrder(t *testing.T) {
	if testenv.Short() {
		t.Skip("starts PostgreSQL and RabbitMQ")
	}
	// The demo's servers are its own: on external ones its relay and notifier would share the
	// exchange outbox and the queue notifications with whoever else uses them (under compose,
	// the stack's relay and notifier), and count their messages.
	testenv.RequireOwn(t, testenv.SharedPostgres(t))
	testenv.RequireOwn(t, testenv.SharedRabbit(t))
	cmd := exec.Command(testenv.Build(t, "examples/cmd/demo"), "-duration", "8s", "-rate", "50")
	out, code := testenv.Run(t, cmd, 4*time.Minute)
	t.Logf("demo output:\n%s", out)
	if code != 0 {
		t.Fatalf("demo exited %d", code)
	}
	m := summaryLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatal("no summary line in the demo output")
	}
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	placed, failed, published, notified, dups := n(1), n(2), n(3), n(4), n(5)
	if placed < 100 || failed != 0 {
		t.Errorf("placed %d, failed %d: want at least 100 placed in 8s at 50/s, none failed", placed, failed)
	}
	if notified != placed || published != placed || dups != 0 {
		t.Errorf("placed %d, published %d, notified %d, duplicates %d: want all published and notified once",
			placed, published, notified, dups)
	}
}
