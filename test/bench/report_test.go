package bench_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/test/bench"
)

// sampleReport is a run with one drain and one steady scenario.
func sampleReport() *bench.Report {
	drain := bench.Scenario{Name: "drain, 1-row tx", Kind: bench.Drain, Rows: 1000, TxSize: 1, Payload: 300, Queue: bench.Classic}
	steady := bench.Scenario{Name: "steady 500/s", Kind: bench.Steady, Rate: 500, Duration: 2 * time.Second, Payload: 300, Queue: bench.Classic}
	big := bench.Scenario{Name: "one 100,000-row tx", Kind: bench.Drain, Rows: 100000, TxSize: 100000, Payload: 300,
		Queue: bench.Classic, Memory: true}
	res := func(sc bench.Scenario, who bench.Contender, rate float64, cpu float64, p50 time.Duration) bench.Result {
		r := bench.Result{Scenario: sc, Contender: who, Messages: 1000, Throughput: rate, RelayCPU: cpu, PGCPU: 0.1,
			BrokerCPU: 0.2, RelayRSS: 20 << 20, WALInsert: 640, WALRelay: 0, WALVacuum: math.NaN()}
		if sc.Kind == bench.Steady {
			r.Latency = &bench.Percentiles{N: 1000, P50: p50, P99: 4 * p50, P999: 5 * p50, Max: 6 * p50}
		}
		return r
	}
	fail := res(drain, bench.Poll1s, 0, -1, 0)
	fail.Err = "3 of 1000 messages after 2m0s without progress\nmore"
	return &bench.Report{
		Started: time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC), Finished: time.Date(2026, 11, 22, 8, 30, 0, 0, time.UTC),
		Window: 1024, PollBatch: 100, Producers: 4, Chart: "results.svg",
		Results: []bench.Result{
			res(drain, bench.Ceiling, 10000, 0.3, 0),
			res(drain, bench.Walbox, 9500, 0.02, 0),
			res(drain, bench.Poll100ms, 1000, 0.5, 0),
			fail,
			res(steady, bench.Walbox, 500, 0.1, time.Millisecond),
			res(steady, bench.Poll100ms, 500, 0.1, 60*time.Millisecond),
			res(big, bench.Walbox, 8000, 1, 0),
		},
		HotPath: []bench.HotPathResult{{Name: "decode insert", NsPerMsg: 1500, MsgsPerSec: 666666}},
	}
}

func TestTargetsAreRatiosWithinTheRun(t *testing.T) {
	got := map[string]string{}
	for _, tg := range sampleReport().Targets() {
		met := "missed"
		if tg.Met {
			met = "met"
		}
		got[tg.Name] = met + ": " + tg.Figure
	}
	want := map[string]string{
		"drain ≥ 90% of ceiling: drain, 1-row tx":    "met: 95% (9500 of 10000 msg/s)",
		"drain ≥ 8× polling: drain, 1-row tx":        "met: 9.5× (9500 vs 1000 msg/s, polling 100ms)",
		"relay CPU ≤ 30 µs/msg: drain, 1-row tx":     "met: 20.0 µs/msg",
		"p99 ≤ 25ms at 500/s: steady 500/s":          "met: commit → consumer 4.00 ms",
		"p50 ≥ 20× lower than polling: steady 500/s": "met: 60× (1.00 ms vs 60.0 ms, polling 100ms)",
		"relay CPU ≤ 30 µs/msg: one 100,000-row tx":  "missed: 1000.0 µs/msg",
		"peak RSS ≤ 48 MiB: one 100,000-row tx":      "met: 20.0 MiB",
		"decode ≥ 500,000 inserts/s on one core":     "met: 666666 msgs/s",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: got %q, want %q", name, got[name], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d targets, want %d: %v", len(got), len(want), got)
	}
}

func TestMarkdownHasEveryResult(t *testing.T) {
	markdown(t, sampleReport(),
		"![throughput and latency](results.svg)",
		"| drain, 1-row tx | walbox | 1000 | 9500 | 95% | 0 / 0 | 0.02 | 20.0 | 0.10 | 0.20 | 200.0 | 20.0 MiB | 640 | 0 | – |",
		"| drain, 1-row tx | polling 1s | 1000 | failed |",
		"| steady 500/s | walbox | 1000 | – | – | 0 / 0 | 1.00 ms | 4.00 ms | 5.00 ms | 6.00 ms | – | – | – |",
		"- drain, 1-row tx / polling 1s: 3 of 1000 messages after 2m0s without progress\n",
		"| decode insert | 1500 | 666666 |",
	)
}

// markdown renders rep as markdown and fails the test for each of wants that it lacks.
func markdown(t *testing.T, rep *bench.Report, wants ...string) string {
	t.Helper()
	var b strings.Builder
	rep.Markdown(&b)
	md := b.String()
	for _, want := range wants {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	return md
}

func TestSVGIsWellFormed(t *testing.T) {
	for name, rep := range map[string]*bench.Report{"sample": sampleReport(), "empty": {}} {
		var b strings.Builder
		rep.SVG(&b)
		if !strings.HasPrefix(b.String(), "<svg ") {
			t.Errorf("%s: not an SVG", name)
		}
		checkXML(t, b.String())
	}
}

func TestClusterReportSetsEachBesideTheOnePublisherCeiling(t *testing.T) {
	drain := bench.Scenario{Name: "cluster drain", Kind: bench.Drain, Rows: 1000, TxSize: 1, Payload: 300, Queue: bench.Quorum}
	steady := bench.Scenario{Name: "cluster steady", Kind: bench.Steady, Rate: 500, Duration: 2 * time.Second, Payload: 300,
		Queue: bench.Quorum}
	res := func(sc bench.Scenario, who bench.Contender, rate float64, p50 time.Duration) bench.Result {
		r := bench.Result{Scenario: sc, Contender: who, Messages: 1000, Throughput: rate, RelayCPU: 0.1, PGCPU: 0.1,
			BrokerCPU: 0.3, RelayRSS: 20 << 20, WALInsert: math.NaN(), WALRelay: math.NaN(), WALVacuum: math.NaN()}
		if sc.Kind == bench.Steady {
			r.Latency = &bench.Percentiles{N: 1000, P50: p50, P99: 10 * p50, P999: 20 * p50, Max: 30 * p50}
		}
		return r
	}
	rep := &bench.Report{Nodes: 3, Window: 1024, Results: []bench.Result{
		res(drain, bench.Ceiling, 8000, 0), res(drain, bench.Ceiling3, 12000, 0),
		res(drain, bench.Walbox, 6000, 0), res(drain, bench.Walbox3, 10000, 0),
		res(steady, bench.Ceiling, 500, 2*time.Millisecond), res(steady, bench.Walbox3, 500, 5*time.Millisecond),
	}}
	md := markdown(t, rep,
		"## A RabbitMQ cluster of 3 nodes",
		"| cluster drain | ceiling | 1 | 8000 | 100% | – | – | – | – |",
		"| cluster drain | ceiling 3 publishers | 3 | 12000 | 150% | – | – | – | – |",
		"| cluster drain | walbox | 1 | 6000 | 75% |",
		"| cluster drain | walbox 3 lanes | 3 | 10000 | 125% |",
		"| cluster steady | walbox 3 lanes | 3 | 500 | – | 5.00 ms | 2.50× | 50.0 ms | 2.50× |",
	)
	if strings.Contains(md, "## Targets") {
		t.Errorf("a cluster report holds the single-node targets:\n%s", md)
	}
	var svg strings.Builder
	rep.SVG(&svg)
	checkXML(t, svg.String())
	if !strings.Contains(svg.String(), ">walbox 3 lanes</text>") {
		t.Error("the chart's legend lacks walbox 3 lanes")
	}
}

// The split turns walbox's cumulative medians into legs, and the bare publisher's call and confirm
// into its own; issue 25's targets set walbox beside no confirms and the baseline build.
func TestSplitAndMedianTargets(t *testing.T) {
	steady := bench.Scenario{Name: "steady 1000/s", Kind: bench.Steady, Rate: 1000, Duration: time.Second, Payload: 300, Queue: bench.Classic}
	p := func(p50 time.Duration) *bench.Percentiles {
		return &bench.Percentiles{P50: p50, P99: 4 * p50, Approx: true}
	}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	walbox := bench.Result{Scenario: steady, Contender: bench.Walbox, Messages: 1000, BrokerCPU: 0.2, Latency: p(ms(1.5)),
		Read: p(ms(0.2)), Publish: p(ms(0.3)), Write: p(ms(0.9)), Confirm: p(ms(2)), Held: p(ms(0.55)), RelayWrites: 700}
	baseline := bench.Result{Scenario: steady, Contender: bench.WalboxBaseline, Messages: 1000, BrokerCPU: 0.3, Latency: p(ms(2)),
		Read: p(ms(0.2)), Publish: p(ms(0.3)), Confirm: p(ms(2.5)), RelayWrites: -1}
	noConfirms := bench.Result{Scenario: steady, Contender: bench.NoConfirms, Messages: 1000, BrokerCPU: 0.1, RelayWrites: 1000,
		Latency: &bench.Percentiles{P50: ms(0.6), P99: ms(2)}, Write: &bench.Percentiles{P50: ms(0.05)}}
	rep := &bench.Report{Results: []bench.Result{noConfirms, baseline, walbox}}
	var md strings.Builder
	rep.Markdown(&md)
	for _, row := range []string{
		"| steady 1000/s | walbox | 0.20 ms | 0.10 ms | 0.60 ms | 1.10 ms | 0.60 ms | 1.50 ms | ≈0.55 ms | 0.70 | 200.0 |",
		"| steady 1000/s | walbox baseline | 0.20 ms | 0.10 ms | – | – | – | 2.00 ms | – | – | 300.0 |",
		"| steady 1000/s | no confirms | – | – | 0.05 ms | – | 0.55 ms | 0.60 ms | – | 1.00 | 100.0 |",
		"| p50 ≤ no confirms + 1 ms: steady 1000/s | 1.50 ms vs 0.60 ms | yes |",
		"| broker CPU per message ≤ baseline: steady 1000/s | 200.0 vs 300.0 µs/msg (the baseline ran first) | yes |",
		"| p99 ≤ baseline: steady 1000/s | 6.00 ms vs 8.00 ms (the baseline ran first) | yes |",
	} {
		if !strings.Contains(md.String(), row) {
			t.Errorf("no row %q in\n%s", row, md.String())
		}
	}
	// The target says which build ran first: its place moves the broker's CPU.
	rep = &bench.Report{Results: []bench.Result{noConfirms, walbox, baseline}}
	md.Reset()
	rep.Markdown(&md)
	if row := "| broker CPU per message ≤ baseline: steady 1000/s | 200.0 vs 300.0 µs/msg (walbox ran first) | yes |"; !strings.Contains(md.String(), row) {
		t.Errorf("no row %q in\n%s", row, md.String())
	}
}

func TestAlternateBaselinePutsEachBuildFirstInTurn(t *testing.T) {
	sc := func(name string, cs ...bench.Contender) bench.Scenario {
		return bench.Scenario{Name: name, Contenders: cs}
	}
	in := bench.WithBaseline([]bench.Scenario{
		sc("a", bench.Ceiling, bench.Walbox),
		sc("b", bench.Ceiling),
		sc("c", bench.Walbox, bench.Poll1s),
		sc("d", bench.NoConfirms, bench.Walbox),
	})
	// walbox alone (-contenders dropped the baseline there) neither changes nor counts.
	in = append(in[:2:2], append([]bench.Scenario{sc("w", bench.Walbox)}, in[2:]...)...)
	order := func(ss []bench.Scenario) string {
		var b strings.Builder
		for _, s := range ss {
			fmt.Fprintf(&b, "%s:%v ", s.Name, s.Contenders)
		}
		return b.String()
	}
	got := order(bench.AlternateBaseline(in, true))
	want := "a:[ceiling walbox baseline walbox] b:[ceiling] w:[walbox] c:[walbox walbox baseline polling 1s] d:[no confirms walbox baseline walbox] "
	if got != want {
		t.Errorf("baseline first:\n got %s\nwant %s", got, want)
	}
	got = order(bench.AlternateBaseline(in, false))
	want = "a:[ceiling walbox walbox baseline] b:[ceiling] w:[walbox] c:[walbox baseline walbox polling 1s] d:[no confirms walbox walbox baseline] "
	if got != want {
		t.Errorf("walbox first:\n got %s\nwant %s", got, want)
	}
	if order(in) != "a:[ceiling walbox baseline walbox] b:[ceiling] w:[walbox] c:[walbox baseline walbox polling 1s] d:[no confirms walbox baseline walbox] " {
		t.Errorf("the input changed: %s", order(in))
	}
}
