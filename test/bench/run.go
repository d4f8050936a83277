package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Report is the outcome of a run.
type Report struct {
	Machine   Machine
	Command   string
	Started   time.Time
	Finished  time.Time
	LoadStart float64 // 1-minute load average when the run started
	LoadEnd   float64
	PollBatch int
	Window    int
	Producers int
	Profiled  bool
	Nodes     int // of the broker: 1, or a cluster's size
	Results   []Result
	HotPath   []HotPathResult
	// Chart is the path of the SVG chart relative to the markdown file, linked from it if set.
	Chart string
}

// Machine describes where the run happened.
type Machine struct {
	CPUs     int
	CPUModel string
	Memory   int64 // bytes
	Kernel   string
	Go       string
	Postgres string
	RabbitMQ string
}

// Run runs every scenario's contenders in turn against srv and returns the report. A trial that
// fails is recorded with its error and the run goes on; Run returns an error only when it cannot
// run at all or ctx ends (with the report so far).
func Run(ctx context.Context, cfg Config, srv Servers) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	admin, err := pgx.Connect(ctx, srv.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	defer admin.Close(context.Background())
	b := &bencher{cfg: cfg, srv: srv, admin: admin}
	rep := &Report{Machine: machine(ctx, srv), Command: cfg.Command, Started: time.Now(), LoadStart: loadAvg(),
		PollBatch: cfg.PollBatch, Window: cfg.Window, Producers: cfg.Producers, Profiled: cfg.Profile,
		Nodes: len(srv.brokerURLs())}
	defer func() { rep.Finished, rep.LoadEnd = time.Now(), loadAvg() }()
	if cfg.HotPath {
		fmt.Fprintln(cfg.Log, "hot path (in process, one core) ...")
		if rep.HotPath, err = HotPath(); err != nil {
			return rep, err
		}
	}
	for _, sc := range cfg.Scenarios {
		for _, who := range sc.Contenders {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			r := b.trial(ctx, sc, who)
			fmt.Fprintf(cfg.Log, "%-30s %-14s %s\n", sc.Name, who, summary(r))
			rep.Results = append(rep.Results, r)
		}
	}
	return rep, ctx.Err()
}

// summary is a result's progress line.
func summary(r Result) string {
	if r.Err != "" {
		return "FAILED: " + firstLine(r.Err)
	}
	s := fmt.Sprintf("%8.0f msg/s", r.Throughput)
	if r.Latency != nil {
		s += fmt.Sprintf("  p50 %s  p99 %s", ms(r.Latency.P50), ms(r.Latency.P99))
	}
	if r.LoadLag != nil {
		s += fmt.Sprintf("  load lag p99 %s", ms(r.LoadLag.P99))
	}
	if us := r.CPUPerMessage(); us >= 0 {
		s += fmt.Sprintf("  %.1f µs/msg", us)
	}
	if us := r.BrokerCPUPerMessage(); us >= 0 {
		s += fmt.Sprintf("  broker %.1f µs/msg", us)
	}
	return s + fmt.Sprintf("  load %.2f", loadAvg())
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func machine(ctx context.Context, srv Servers) Machine {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return Machine{
		CPUs:     runtime.NumCPU(),
		CPUModel: cpuModel(),
		Memory:   memTotal(),
		Kernel:   strings.TrimSpace(string(kernel)),
		Go:       runtime.Version(),
		Postgres: serverVersion(ctx, srv.DatabaseURL),
		RabbitMQ: brokerVersion(srv.AMQPURL),
	}
}
