package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/walbox/walbox/test/bench"
)

// runShards measures what sharding costs: a backlog drained by one relay per shard, for each
// shard count of -shards, with the walsenders' CPU read from /proc.
func runShards(ctx context.Context, o options, stdout, stderr io.Writer) int {
	cfg := bench.ShardsConfig{Rows: 100000, TxSize: 10, Window: o.window, Log: stderr}
	if o.quick {
		cfg.Rows = 5000
	}
	if o.rows > 0 {
		cfg.Rows = o.rows
	}
	for _, s := range strings.Split(o.shards, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "walbox-bench: -shards: %q is not a shard count\n", s)
			return 2
		}
		cfg.Counts = append(cfg.Counts, n)
	}
	dir, err := os.MkdirTemp("", "walbox-bench-shards-")
	if err != nil {
		fmt.Fprintf(stderr, "walbox-bench: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	cfg.Dir = dir
	if cfg.Walbox = o.walboxBin; cfg.Walbox == "" {
		if cfg.Walbox, err = bench.BuildWalbox(ctx, dir); err != nil {
			fmt.Fprintf(stderr, "walbox-bench: %v\n", err)
			return 1
		}
	}
	srv, stopServers, err := bench.StartServers()
	defer stopServers()
	if err != nil {
		fmt.Fprintf(stderr, "walbox-bench: %v\n", err)
		return 1
	}
	started := time.Now()
	results := bench.Shards(ctx, cfg, srv)
	md := fmt.Sprintf("Drain of %d rows (1,000 aggregates, transactions of %d rows), one relay per shard, window %d; "+
		"%s, %d CPUs, load average %s at the end; run took %s.\n\n%s",
		cfg.Rows, cfg.TxSize, cfg.Window, started.UTC().Format("2006-01-02 15:04 UTC"), numCPU(), loadAverage(),
		time.Since(started).Round(time.Second), bench.ShardsMarkdown(results))
	fmt.Fprint(stdout, md)
	if err := os.WriteFile(o.shardsOut, []byte(md), 0o644); err != nil {
		fmt.Fprintf(stderr, "walbox-bench: %v\n", err)
		return 1
	}
	for _, r := range results {
		if r.Err != "" {
			return 1
		}
	}
	return 0
}

func numCPU() int {
	data, _ := os.ReadFile("/proc/cpuinfo")
	return max(strings.Count(string(data), "processor\t:"), 1)
}

func loadAverage() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
