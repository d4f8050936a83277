package main

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/test/bench"
)

func scenariosOf(t *testing.T, args ...string) []bench.Scenario {
	t.Helper()
	o, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	scs, err := o.scenarioList()
	if err != nil {
		t.Fatalf("scenarios of %v: %v", args, err)
	}
	return scs
}

func TestDefaultsAreTheIssueSizes(t *testing.T) {
	scs := scenariosOf(t)
	if len(scs) != 12 {
		t.Fatalf("got %d scenarios, want 12", len(scs))
	}
	if got := scs[0]; got.Rows != 200_000 || got.TxSize != 1 || len(got.Contenders) != len(bench.AllContenders)+1 {
		t.Errorf("first scenario %+v: want a 200,000-row drain of single-row transactions by every contender and walbox stream", got)
	}
	var rates []int
	for _, sc := range scs {
		if sc.Kind == bench.Steady {
			if sc.Duration != time.Minute {
				t.Errorf("%s runs %v, want 1m", sc.Name, sc.Duration)
			}
			rates = append(rates, sc.Rate)
		}
	}
	if got := len(rates); got != 6 {
		t.Errorf("got %d steady scenarios (%v), want 6: in process and through pgbench", got, rates)
	}
}

func TestQuickAndExplicitSizes(t *testing.T) {
	scs := scenariosOf(t, "-quick", "-rows", "300", "-steady", "2s", "-rates", "100")
	for _, sc := range scs {
		switch {
		case sc.Kind == bench.Drain && !sc.Memory && sc.Payload == 300 && sc.Rows != 300:
			t.Errorf("%s: %d rows, want 300", sc.Name, sc.Rows)
		case sc.Kind == bench.Steady && sc.Duration != 2*time.Second:
			t.Errorf("%s: runs %v, want 2s", sc.Name, sc.Duration)
		}
	}
}

func TestSelection(t *testing.T) {
	scs := scenariosOf(t, "-scenarios", "^steady", "-contenders", "walbox, polling 1s")
	for _, sc := range scs {
		if !strings.HasPrefix(sc.Name, "steady") || len(sc.Contenders) != 2 {
			t.Errorf("selected %s with %v", sc.Name, sc.Contenders)
		}
	}
	for _, args := range [][]string{{"-contenders", "kafka"}, {"-scenarios", "nothing matches"}, {"-rates", "fast"}, {"-scenarios", "("}} {
		o, err := parseFlags(args, io.Discard)
		if err == nil {
			_, err = o.scenarioList()
		}
		if err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
}

func TestPgbenchScenariosStandBesideTheInProcessOnes(t *testing.T) {
	scs := scenariosOf(t, "-scenarios", "^steady 2000/s")
	if len(scs) != 2 || scs[0].Load != bench.InProcess || scs[1].Load != bench.Pgbench {
		t.Fatalf("got %v, want steady 2000/s in process, then through pgbench", scs)
	}
	for _, c := range scs[1].Contenders {
		if c == bench.Ceiling || c == bench.NoConfirms {
			t.Errorf("%s runs %s, which has no database to load", scs[1].Name, c)
		}
	}
}

func TestSVGBesideTheMarkdown(t *testing.T) {
	o, _ := parseFlags([]string{"-out", "docs/bench/x.md"}, io.Discard)
	if got := o.svgPath(); got != "docs/bench/x.svg" {
		t.Errorf("got %s", got)
	}
}

func TestClusterRun(t *testing.T) {
	o, err := parseFlags([]string{"-cluster", "-quick"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.out != "docs/bench/cluster.md" {
		t.Errorf("-cluster writes to %s, want docs/bench/cluster.md", o.out)
	}
	scs, err := o.scenarioList()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[bench.Kind]int{}
	for _, sc := range scs {
		kinds[sc.Kind]++
		if sc.Queue != bench.Quorum || len(sc.Contenders) != 4 {
			t.Errorf("%s: %s queue, contenders %v; want quorum and all four", sc.Name, sc.Queue, sc.Contenders)
		}
	}
	if kinds[bench.Drain] != 1 || kinds[bench.Steady] != 2 {
		t.Errorf("got %v drain and steady scenarios, want 1 and 2", kinds)
	}
	scs = scenariosOf(t, "-cluster", "-contenders", "ceiling,walbox 3 lanes")
	if got := scs[0].Contenders; len(got) != 2 || got[1] != bench.Walbox3 {
		t.Errorf("selected %v", got)
	}
	if o, _ := parseFlags([]string{"-contenders", "walbox 3 lanes"}, io.Discard); o.out != "docs/bench/results.md" {
		t.Errorf("without -cluster writes to %s", o.out)
	} else if _, err := o.scenarioList(); err == nil {
		t.Error("walbox 3 lanes without -cluster: want an error")
	}
}

// -baseline-bin runs the other build beside walbox wherever walbox runs, and only then is the
// contender known. The two swap places scenario by scenario; -baseline-after swaps the start.
func TestBaselineRunsBesideWalbox(t *testing.T) {
	scs := scenariosOf(t, "-baseline-bin", "/tmp/walbox-main", "-scenarios", "^steady 2000/s$", "-contenders", "no confirms,walbox,walbox baseline")
	if len(scs) != 1 || fmt.Sprint(scs[0].Contenders) != "[no confirms walbox baseline walbox]" {
		t.Fatalf("selected %v", scs)
	}
	o, err := parseFlags([]string{"-contenders", "walbox baseline"}, io.Discard)
	if err == nil {
		_, err = o.scenarioList()
	}
	if err == nil {
		t.Error("walbox baseline without -baseline-bin: want an error")
	}
	if _, err := parseFlags([]string{"-baseline-after"}, io.Discard); err == nil {
		t.Error("-baseline-after without -baseline-bin: want an error")
	}

	order := func(args ...string) string {
		var b strings.Builder
		for _, sc := range scenariosOf(t, args...) {
			fmt.Fprintf(&b, "%s: %v; ", sc.Name, sc.Contenders)
		}
		return b.String()
	}
	args := []string{"-baseline-bin", "/tmp/walbox-main", "-scenarios", "^steady (500|2000)/s$", "-contenders", "walbox,walbox baseline"}
	if got, want := order(args...), "steady 500/s: [walbox baseline walbox]; steady 2000/s: [walbox walbox baseline]; "; got != want {
		t.Errorf("order %q, want %q", got, want)
	}
	if got, want := order(append(args, "-baseline-after")...), "steady 500/s: [walbox walbox baseline]; steady 2000/s: [walbox baseline walbox]; "; got != want {
		t.Errorf("with -baseline-after: order %q, want %q", got, want)
	}
}
