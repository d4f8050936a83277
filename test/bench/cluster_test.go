package bench_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/bench"
)

// TestCluster runs the cluster scenarios at tiny sizes on the shared three-node cluster: the
// ceiling with one and three publishers and walbox (with three lanes too, once the binary has the
// flag), a drain and a steady run into a quorum queue. It checks that every row arrived and every
// figure was measured, with the broker's CPU over all nodes, and that the report carries the
// ratios; never how good they are.
func TestCluster(t *testing.T) {
	if testenv.Short() {
		t.Skip("benchmark cluster run: needs PostgreSQL and a RabbitMQ cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cluster := testenv.SharedCluster(t)
	dir, bin := buildWalbox(ctx, t)
	pg := testenv.StartPostgres(t, bench.PostgresOptions()...)
	contenders := []bench.Contender{bench.Ceiling, bench.Ceiling3, bench.Walbox}
	if hasLanes(t, bin) {
		contenders = append(contenders, bench.Walbox3)
	} else {
		t.Log("walbox run has no --lanes flag yet: walbox with 3 lanes left out")
	}
	scenarios := []bench.Scenario{
		{Name: "cluster drain", Kind: bench.Drain, Rows: 300, TxSize: 1, Payload: 300, Queue: bench.Quorum, Contenders: contenders},
		{Name: "cluster steady", Kind: bench.Steady, Rate: 200, Duration: 2 * time.Second, Payload: 300, Queue: bench.Quorum,
			Contenders: contenders},
	}
	rep, err := bench.Run(ctx, bench.Config{Scenarios: scenarios, WalboxBin: bin, WorkDir: dir, Log: testLog{t}},
		bench.ClusterServersOf(pg, cluster))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(rep.Results), 2*len(contenders); got != want {
		t.Fatalf("got %d results, want %d", got, want)
	}
	for _, r := range rep.Results {
		checkResult(t, r)
	}
	if rep.Nodes != testenv.ClusterSize {
		t.Errorf("report of a broker of %d nodes, want %d", rep.Nodes, testenv.ClusterSize)
	}
	md := markdown(t, rep, "## A RabbitMQ cluster of 3 nodes", "| cluster drain | ceiling 3 publishers | 3 | ",
		"| cluster steady | walbox | 1 | ")
	if strings.Contains(md, "## Targets") {
		t.Errorf("a cluster run reports the single-node targets:\n%s", md)
	}
}

// hasLanes reports whether the walbox binary knows `run --lanes`.
func hasLanes(t *testing.T, bin string) bool {
	t.Helper()
	out, _ := testenv.Run(t, exec.Command(bin, "run", "-help"), time.Minute)
	if !strings.Contains(out, "Usage: walbox run") {
		t.Fatalf("walbox run -help printed no usage:\n%s", out)
	}
	return strings.Contains(out, "\n  -lanes ")
}
