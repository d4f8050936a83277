// Command walbox-bench measures walbox beside the broker's ceiling (a raw AMQP publisher) and a
// polling relay, on the same data, in one run. It starts its own throwaway PostgreSQL
// (wal_level=logical) and RabbitMQ from the local binaries, runs each scenario for each contender
// in turn, prints a markdown table and writes it to a file, with an SVG chart beside it. It lives
// in the test module; run it from the repository's top folder, where its default paths point:
//
//	make bench                                   # builds bin/walbox-bench and runs the full run
//	bin/walbox-bench -quick                      # every scenario at tiny sizes (a few minutes)
//	bin/walbox-bench -cluster                    # a three-node cluster and a quorum queue
//	(cd test && go build -o ../bin/ ./cmd/walbox-bench)   # build it alone
//
// See docs/performance.md for what is measured and the latest results.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/walbox/walbox/test/bench"
)

func main() {
	if bench.IsChild() {
		os.Exit(bench.RunChild())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command line.
type options struct {
	quick                      bool
	rows, largeRows, rssRows   int
	bigTx                      int
	steady                     time.Duration
	rates                      string
	scenarios, contenders      string
	out, svg                   string
	walboxBin, workDir         string
	baselineBin                string
	baselineAfter              bool
	pollBatch, window, produce int
	profile, hotPath, keep     bool
	cluster                    bool
	waitLoad                   float64
	waitMax                    time.Duration
	shards, shardsOut          string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("walbox-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&o.quick, "quick", false, "every scenario at tiny sizes, for trying the tool out (explicit size flags still win)")
	fs.IntVar(&o.rows, "rows", 0, "drain backlog rows (default 200000; -quick 2000)")
	fs.IntVar(&o.largeRows, "large-rows", 0, "drain backlog rows of 10 KB (default 40000; -quick 500)")
	fs.IntVar(&o.rssRows, "rss-rows", 0, "backlog rows of the peak-RSS drain (default 1000000; -quick 10000)")
	fs.IntVar(&o.bigTx, "big-tx", 0, "rows of the single large transaction (default 100000; -quick 5000)")
	fs.DurationVar(&o.steady, "steady", 0, "how long each steady producer runs (default 60s; -quick 3s)")
	fs.StringVar(&o.rates, "rates", "", "steady rates in rows/s, comma-separated (default 500,2000)")
	fs.StringVar(&o.scenarios, "scenarios", "", "run only the scenarios whose name matches this regular expression")
	fs.StringVar(&o.contenders, "contenders", "", "run only these contenders, comma-separated: ceiling, no confirms, walbox, polling 100ms, polling 1s, walbox stream (drains only) "+
		"(and walbox baseline, with -baseline-bin); "+
		"with -cluster: ceiling, ceiling 3 publishers, walbox, walbox 3 lanes")
	fs.BoolVar(&o.cluster, "cluster", false, "instead of the standard scenarios, drain and steady runs against a three-node RabbitMQ cluster "+
		"with a quorum queue: the ceiling with 1 and 3 publishers, walbox with 1 and 3 lanes")
	fs.StringVar(&o.out, "out", "", "markdown file to write the results to (default docs/bench/results.md; -cluster: docs/bench/cluster.md)")
	fs.StringVar(&o.svg, "svg", "", "SVG chart to write (default: the -out file with .svg)")
	fs.StringVar(&o.walboxBin, "walbox-bin", "", "walbox binary to measure (default: build ./cmd/walbox)")
	fs.StringVar(&o.baselineBin, "baseline-bin", "", "another walbox build to measure beside it, as the contender \"walbox baseline\" "+
		"(before walbox in the first scenario that runs both, after it in the next, and so on): build against build in one run")
	fs.BoolVar(&o.baselineAfter, "baseline-after", false, "with -baseline-bin: run walbox before the baseline in the first scenario "+
		"(a trial's place in the run moves its broker CPU; a second run with this flag and the same -scenarios and -contenders puts each build in each place)")
	fs.StringVar(&o.workDir, "work-dir", "", "directory for the relays' logs and profiles (default: a temporary one, removed unless -keep)")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory")
	fs.IntVar(&o.pollBatch, "poll-batch", 100, "the polling relay's batch size")
	fs.IntVar(&o.window, "window", 1024, "messages in flight for walbox and the ceiling")
	fs.IntVar(&o.produce, "producers", 4, "connections that commit the rows")
	fs.BoolVar(&o.profile, "profile", false, "run walbox in-process under pprof (profiles in the work dir, kept); its figures are then not walbox's")
	fs.BoolVar(&o.hotPath, "hot-path", true, "also measure the per-message work in process (decode, build, track); not with -cluster")
	fs.Float64Var(&o.waitLoad, "wait-load", 0, "before starting, wait until the 1-minute load average is below this (0: don't wait)")
	fs.DurationVar(&o.waitMax, "wait-max", 40*time.Minute, "give up waiting for -wait-load after this long and run anyway")
	fs.StringVar(&o.shards, "shards", "", "instead of the scenarios, drain -rows with each of these shard counts, one relay per shard (e.g. 1,2,4)")
	fs.StringVar(&o.shardsOut, "shards-out", "docs/bench/shards.md", "markdown file to write the -shards results to")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.baselineAfter && o.baselineBin == "" {
		return o, errors.New("-baseline-after orders walbox and the baseline: it needs -baseline-bin")
	}
	if o.out == "" {
		o.out = "docs/bench/results.md"
		if o.cluster {
			o.out = "docs/bench/cluster.md"
		}
	}
	return o, nil
}

// sizes returns the scenario sizes: the full or quick ones, with explicit flags winning.
func (o options) sizes() (bench.Sizes, error) {
	z := bench.FullSizes
	if o.quick {
		z = bench.QuickSizes
	}
	for _, f := range []struct {
		v   int
		dst *int
	}{{o.rows, &z.Rows}, {o.largeRows, &z.LargeRows}, {o.rssRows, &z.RSSRows}, {o.bigTx, &z.BigTx}} {
		if f.v < 0 {
			return z, errors.New("sizes must be positive")
		}
		if f.v > 0 {
			*f.dst = f.v
		}
	}
	if o.steady > 0 {
		z.Steady = o.steady
	}
	if o.rates != "" {
		z.Rates = nil
		for _, s := range strings.Split(o.rates, ",") {
			r, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || r < 1 {
				return z, fmt.Errorf("-rates: %q is not a positive number", s)
			}
			z.Rates = append(z.Rates, r)
		}
	}
	return z, nil
}

// scenarioList returns the scenarios selected by -scenarios and -contenders.
func (o options) scenarioList() ([]bench.Scenario, error) {
	z, err := o.sizes()
	if err != nil {
		return nil, err
	}
	keep, err := o.contenderSet()
	if err != nil {
		return nil, err
	}
	re, err := regexp.Compile(o.scenarios)
	if err != nil {
		return nil, fmt.Errorf("-scenarios: %w", err)
	}
	all, _ := o.set()
	scenarios := all(z)
	if o.baselineBin != "" {
		scenarios = bench.WithBaseline(scenarios)
	}
	var out []bench.Scenario
	for _, sc := range scenarios {
		if !re.MatchString(sc.Name) {
			continue
		}
		var cs []bench.Contender
		for _, c := range sc.Contenders {
			if keep == nil || keep[c] {
				cs = append(cs, c)
			}
		}
		if len(cs) > 0 {
			sc.Contenders = cs
			out = append(out, sc)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("-scenarios and -contenders select nothing")
	}
	return bench.AlternateBaseline(out, !o.baselineAfter), nil
}

func (o options) contenderSet() (map[bench.Contender]bool, error) {
	if o.contenders == "" {
		return nil, nil
	}
	_, known := o.set()
	if o.baselineBin != "" {
		known = append(known, bench.WalboxBaseline)
	}
	set := map[bench.Contender]bool{}
	for _, s := range strings.Split(o.contenders, ",") {
		c := bench.Contender(strings.TrimSpace(s))
		found := false
		for _, k := range known {
			found = found || k == c
		}
		if !found {
			return nil, fmt.Errorf("-contenders: unknown contender %q", s)
		}
		set[c] = true
	}
	return set, nil
}

// set returns the scenarios and contenders of the run: the standard ones, or -cluster's.
func (o options) set() (func(bench.Sizes) []bench.Scenario, []bench.Contender) {
	if o.cluster {
		return bench.ClusterScenarios, bench.ClusterContenders
	}
	return bench.Scenarios, append(bench.AllContenders[:len(bench.AllContenders):len(bench.AllContenders)], bench.WalboxStream)
}

func (o options) svgPath() string {
	if o.svg != "" {
		return o.svg
	}
	return strings.TrimSuffix(o.out, filepath.Ext(o.out)) + ".svg"
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "walbox-bench: %v\n", err)
		return 2
	}
	if o.shards != "" {
		return runShards(ctx, o, stdout, stderr)
	}
	scenarios, err := o.scenarioList()
	if err != nil {
		fmt.Fprintf(stderr, "walbox-bench: %v\n", err)
		return 2
	}
	rep, err := measure(ctx, o, scenarios, args, stderr)
	if rep != nil {
		if werr := write(rep, o, stdout, stderr); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "walbox-bench: %v\n", err)
		return 1
	}
	for _, r := range rep.Results {
		if r.Err != "" {
			fmt.Fprintln(stderr, "walbox-bench: some trials failed; see the report")
			return 1
		}
	}
	return 0
}

// measure waits for a quiet machine if asked, builds walbox, starts the servers and runs.
func measure(ctx context.Context, o options, scenarios []bench.Scenario, args []string, log io.Writer) (*bench.Report, error) {
	if err := waitForLoad(ctx, o.waitLoad, o.waitMax, log); err != nil {
		return nil, err
	}
	dir, cleanup, err := workDir(o, log)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	bin := o.walboxBin
	if bin == "" {
		fmt.Fprintln(log, "building walbox ...")
		if bin, err = bench.BuildWalbox(ctx, dir); err != nil {
			return nil, err
		}
	}
	startServers := bench.StartServers
	if o.cluster {
		startServers = bench.StartClusterServers
	}
	fmt.Fprintln(log, "starting PostgreSQL and RabbitMQ ...")
	srv, stopServers, err := startServers()
	defer stopServers()
	if err != nil {
		return nil, err
	}
	return bench.Run(ctx, bench.Config{
		Scenarios:   scenarios,
		WalboxBin:   bin,
		BaselineBin: o.baselineBin,
		WorkDir:     dir,
		PollBatch:   o.pollBatch,
		Window:      o.window,
		Producers:   o.produce,
		Profile:     o.profile,
		HotPath:     o.hotPath && !o.cluster,
		Log:         log,
		Command:     strings.TrimSpace("bin/walbox-bench " + strings.Join(args, " ")),
	}, srv)
}

func workDir(o options, log io.Writer) (string, func(), error) {
	if o.workDir != "" {
		if err := os.MkdirAll(o.workDir, 0o755); err != nil {
			return "", nil, fmt.Errorf("work dir: %w", err)
		}
		return o.workDir, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "walbox-bench-")
	if err != nil {
		return "", nil, fmt.Errorf("work dir: %w", err)
	}
	if o.keep || o.profile {
		return dir, func() { fmt.Fprintf(log, "walbox-bench: logs and profiles kept in %s\n", dir) }, nil
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

// waitForLoad polls the load average every 30 s until it is below limit or max has passed.
func waitForLoad(ctx context.Context, limit float64, max time.Duration, log io.Writer) error {
	if limit <= 0 {
		return nil
	}
	deadline := time.Now().Add(max)
	for {
		load := bench.LoadAvg()
		if load < limit {
			return nil
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(log, "load average still %.2f after %v; running anyway\n", load, max)
			return nil
		}
		fmt.Fprintf(log, "load average %.2f, waiting for it to fall below %.2f ...\n", load, limit)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Second):
		}
	}
}

// write prints the markdown and writes it and the SVG chart to their files.
func write(rep *bench.Report, o options, stdout, stderr io.Writer) error {
	if rel, err := filepath.Rel(filepath.Dir(o.out), o.svgPath()); err == nil {
		rep.Chart = rel
	}
	var md strings.Builder
	rep.Markdown(&md)
	fmt.Fprint(stdout, md.String())
	var svg strings.Builder
	rep.SVG(&svg)
	for _, f := range []struct{ path, data string }{{o.out, md.String()}, {o.svgPath(), svg.String()}} {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			return fmt.Errorf("write results: %w", err)
		}
		if err := os.WriteFile(f.path, []byte(f.data), 0o644); err != nil {
			return fmt.Errorf("write results: %w", err)
		}
	}
	fmt.Fprintf(stderr, "walbox-bench: wrote %s and %s\n", o.out, o.svgPath())
	return nil
}
