package bench_test

import (
	"context"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/bench"
)

// TestMain also serves as the benchmark's relays: Run starts this binary again in a child role.
func TestMain(m *testing.M) {
	if bench.IsChild() {
		os.Exit(bench.RunChild())
	}
	os.Exit(testenv.Main(m))
}

// TestSmoke runs the whole benchmark at tiny sizes, so that it cannot rot: every contender, both
// kinds of scenario, both loads of a steady one, both queue types, large payloads and a large
// transaction. It checks that every figure was measured, never how good it is.
func TestSmoke(t *testing.T) {
	all := bench.AllContenders
	db := []bench.Contender{bench.Walbox, bench.Poll100ms}
	scenarios := []bench.Scenario{
		{Name: "drain", Kind: bench.Drain, Rows: 300, TxSize: 1, Payload: 300, Queue: bench.Classic, Contenders: all},
		{Name: "steady", Kind: bench.Steady, Rate: 200, Duration: 2 * time.Second, Payload: 300, Queue: bench.Classic, Contenders: all},
		{Name: "steady, pgbench", Kind: bench.Steady, Rate: 200, Duration: 2 * time.Second, Payload: 300, Queue: bench.Classic,
			Contenders: db, Load: bench.Pgbench},
		{Name: "one tx, 10 KB, quorum", Kind: bench.Drain, Rows: 200, TxSize: 200, Payload: 10 << 10, Queue: bench.Quorum,
			Contenders: db, Memory: true},
		{Name: "drain into a stream", Kind: bench.Drain, Rows: 300, TxSize: 1, Payload: 300, Queue: bench.Classic,
			Contenders: []bench.Contender{bench.WalboxStream}},
	}
	rep, _ := runBench(t, bench.Config{Scenarios: scenarios})
	if got, want := len(rep.Results), 2*len(all)+2*len(db)+1; got != want {
		t.Fatalf("got %d results, want %d", got, want)
	}
	for _, r := range rep.Results {
		checkResult(t, r)
	}
	checkOutput(t, rep)
}

// The profiling run relays in-process, wired as `walbox run` wires it (package relayd), and
// leaves its profiles in the work directory.
func TestProfileRunsTheRelayInProcess(t *testing.T) {
	scenarios := []bench.Scenario{{Name: "drain", Kind: bench.Drain, Rows: 200, TxSize: 1, Payload: 100, Queue: bench.Classic,
		Contenders: []bench.Contender{bench.Walbox}}}
	rep, dir := runBench(t, bench.Config{Scenarios: scenarios, Profile: true})
	if len(rep.Results) != 1 || rep.Results[0].Err != "" || rep.Results[0].Messages != 200 {
		t.Fatalf("results %+v: want 200 messages relayed in-process", rep.Results)
	}
	profiles, _ := filepath.Glob(filepath.Join(dir, "*.cpu.pprof"))
	if len(profiles) == 0 {
		t.Errorf("no CPU profile in %s", dir)
	}
}

// runBench runs cfg's scenarios on servers of the test's own, within four minutes, and returns
// the report and the work directory.
func runBench(t *testing.T, cfg bench.Config) (*bench.Report, string) {
	t.Helper()
	if testenv.Short() {
		t.Skip("benchmark run: needs PostgreSQL and RabbitMQ")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir, bin, pg, rabbit := benchSetup(ctx, t)
	cfg.WalboxBin, cfg.WorkDir, cfg.Log = bin, dir, testLog{t}
	rep, err := bench.Run(ctx, cfg, bench.ServersOf(pg, rabbit))
	if err != nil {
		t.Fatal(err)
	}
	return rep, dir
}

func checkResult(t *testing.T, r bench.Result) {
	t.Helper()
	name := r.Scenario.Name + "/" + string(r.Contender)
	if r.Err != "" {
		t.Errorf("%s: %s", name, r.Err)
		return
	}
	// Duplicates are legitimate (delivery is at least once), so only throughput is checked.
	if r.Throughput <= 0 {
		t.Errorf("%s: throughput %.0f msg/s", name, r.Throughput)
	}
	if r.RelayCPU < 0 || r.PGCPU < 0 || r.BrokerCPU < 0 || r.RelayRSS <= 0 {
		t.Errorf("%s: CPU relay %.2f, postgres %.2f, broker %.2f; RSS %d: want all measured",
			name, r.RelayCPU, r.PGCPU, r.BrokerCPU, r.RelayRSS)
	}
	dbContender := r.Contender != bench.Ceiling && r.Contender != bench.Ceiling3 && r.Contender != bench.NoConfirms
	if got := !math.IsNaN(r.WALInsert) && !math.IsNaN(r.WALRelay); got != dbContender {
		t.Errorf("%s: WAL measured %v, want %v", name, got, dbContender)
	}
	polls := r.Contender == bench.Poll100ms || r.Contender == bench.Poll1s
	if polls && !(r.WALRelay > 0 && r.WALVacuum > 0) {
		t.Errorf("%s: polling relay WAL %.0f B/msg, vacuum %.0f B/msg: want both positive", name, r.WALRelay, r.WALVacuum)
	}
	if r.Scenario.Kind != bench.Steady {
		return
	}
	if r.Latency == nil || r.Latency.N != r.Messages {
		t.Errorf("%s: latency %+v, want one sample per message (%d)", name, r.Latency, r.Messages)
	}
	if dbContender && r.ProducerRate <= 0 {
		t.Errorf("%s: producer rate %.0f rows/s, want it measured", name, r.ProducerRate)
	}
	if pgbench := r.Scenario.Load == bench.Pgbench; pgbench != (r.LoadLag != nil) || pgbench && r.LoadLag.N != r.Messages {
		t.Errorf("%s: load lag %+v: want one sample per message from pgbench, none from the in-process load", name, r.LoadLag)
	}
	if r.Contender == bench.NoConfirms {
		if r.Confirm != nil {
			t.Errorf("%s: commit-to-confirm latency %+v without confirms", name, r.Confirm)
		}
		return
	}
	if r.Confirm == nil || r.Confirm.N < r.Messages {
		t.Errorf("%s: commit-to-confirm latency %+v, want at least %d samples", name, r.Confirm, r.Messages)
	}
	walbox := r.Contender == bench.Walbox || r.Contender == bench.Walbox3
	if walbox != (r.Publish != nil) || walbox && r.Publish.N < r.Messages {
		t.Errorf("%s: commit-to-publish latency %+v: want walbox's alone, at least %d samples", name, r.Publish, r.Messages)
	}
	if walbox != (r.Read != nil) || walbox && r.Read.N < r.Messages {
		t.Errorf("%s: commit-to-read latency %+v: want walbox's alone, at least %d samples", name, r.Read, r.Messages)
	}
}

func checkOutput(t *testing.T, rep *bench.Report) {
	t.Helper()
	markdown(t, rep, "## Drain", "## Steady", "## Targets", "| steady | walbox |", "| drain | polling 1s |",
		"| steady, pgbench | walbox |")
	var svg strings.Builder
	rep.SVG(&svg)
	checkXML(t, svg.String())
}

// checkXML fails unless s is well-formed XML.
func checkXML(t *testing.T, s string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed: %v", err)
		}
	}
}

// testLog routes progress lines to t.Log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestProducerCost measures what each way of writing costs the producer, and the relay's drain
// of each, in one run: briefly by default, for the report with WALBOX_BENCH_PRODUCERS set to a
// trial duration and WALBOX_BENCH_PRODUCER_ROUNDS to a number of rounds (docs/bench/log.md used
// 5s and 3). It checks what must hold whatever the machine:
// walbox_emit leaves no row and no dead tuple, delete-after-insert leaves only dead tuples, and
// every backlog drains completely.
func TestProducerCost(t *testing.T) {
	if testenv.Short() {
		t.Skip("producer cost: needs PostgreSQL and RabbitMQ")
	}
	d := time.Second
	if v := os.Getenv("WALBOX_BENCH_PRODUCERS"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("WALBOX_BENCH_PRODUCERS: %v", err)
		}
	}
	rounds, _ := strconv.Atoi(os.Getenv("WALBOX_BENCH_PRODUCER_ROUNDS"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	_, bin, pg, rabbit := benchSetup(ctx, t)
	results, err := bench.MeasureProducers(ctx, bench.ProducerConfig{Duration: d, Rounds: rounds, Clients: []int{4, 8}, Payload: 300,
		WalboxBin: bin, Log: testLog{t}}, bench.ServersOf(pg, rabbit))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("producer cost, %v per trial:\n%s", d, bench.ProducerTable(results))
	for _, r := range results {
		switch {
		case r.Messages == 0 || r.WALPerMsg <= 0:
			t.Errorf("%s, %d clients: %d messages, %.0f WAL bytes each: nothing measured", r.Mode, r.Clients, r.Messages, r.WALPerMsg)
		case r.Mode == bench.ModeEmit && (r.LiveTuples != 0 || r.DeadTuples != 0):
			t.Errorf("walbox_emit left %d rows and %d dead tuples, want none", r.LiveTuples, r.DeadTuples)
		case r.Mode == bench.ModeTableDelete && (r.LiveTuples != 0 || r.DeadTuples == 0):
			t.Errorf("delete after insert left %d rows and %d dead tuples, want no rows and dead tuples", r.LiveTuples, r.DeadTuples)
		case r.Mode == bench.ModeTable && r.LiveTuples != int64(r.Messages):
			t.Errorf("insert only left %d rows, want %d", r.LiveTuples, r.Messages)
		case r.Clients == 8 && r.Drained != r.Messages:
			t.Errorf("%s: drained %d of %d", r.Mode, r.Drained, r.Messages)
		}
	}
}

// benchSetup builds walbox into a temporary directory and starts the benchmark's own PostgreSQL
// and RabbitMQ servers.
func benchSetup(ctx context.Context, t *testing.T) (dir, bin string, pg *testenv.Postgres, rabbit *testenv.Rabbit) {
	t.Helper()
	dir, bin = buildWalbox(ctx, t)
	return dir, bin, testenv.StartPostgres(t, bench.PostgresOptions()...), testenv.StartRabbit(t, testenv.StreamPlugin())
}

// buildWalbox builds walbox into a temporary directory, which it returns with the binary.
func buildWalbox(ctx context.Context, t *testing.T) (dir, bin string) {
	t.Helper()
	dir = t.TempDir()
	bin, err := bench.BuildWalbox(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, bin
}
