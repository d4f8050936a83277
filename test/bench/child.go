package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// childEnv carries a child's role and settings, as JSON, to this program run again.
const childEnv = "WALBOX_BENCH_CHILD"

// childSpec is what a child process does.
type childSpec struct {
	Role        string        `json:"role"` // "ceiling", "poll" or "walbox-inproc"
	AMQPURL     string        `json:"amqp_url"`
	Exchange    string        `json:"exchange"`
	DatabaseURL string        `json:"database_url,omitempty"`
	Slot        string        `json:"slot,omitempty"`
	Window      int           `json:"window,omitempty"`
	Count       int           `json:"count,omitempty"`    // ceiling: messages to publish
	Rate        int           `json:"rate,omitempty"`     // ceiling: messages per second; 0: as fast as possible
	Payload     int           `json:"payload,omitempty"`  // ceiling: payload bytes
	Batch       int           `json:"batch,omitempty"`    // poll: rows per poll
	Interval    time.Duration `json:"interval,omitempty"` // poll: wait after a short batch
	Profile     string        `json:"profile,omitempty"`  // walbox-inproc: profile path prefix
	// ResultFile receives the confirm latencies when the child stops (ceiling and poll), counted
	// for messages from payload seq MeasureFrom on.
	ResultFile  string `json:"result_file,omitempty"`
	MeasureFrom int    `json:"measure_from,omitempty"`
	// Publishers (ceiling) is how many connections publish, 1 if 0; they take the broker's Nodes
	// in turn (AMQPURL alone if Nodes is empty).
	Publishers int      `json:"publishers,omitempty"`
	Nodes      []string `json:"nodes,omitempty"`
	// NoConfirms (ceiling) publishes transient messages, not mandatory, without confirms.
	NoConfirms bool `json:"no_confirms,omitempty"`
}

// IsChild reports whether this process was started as one of the benchmark's relays. A program
// or test binary that runs the benchmark must then call RunChild and exit with its result
// before doing anything else:
//
//	if bench.IsChild() {
//		os.Exit(bench.RunChild())
//	}
func IsChild() bool { return os.Getenv(childEnv) != "" }

// RunChild runs the relay this process was started as until SIGTERM or SIGINT and returns the
// exit code.
func RunChild() int {
	var spec childSpec
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "walbox-bench child: bad %s: %v\n", childEnv, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	switch spec.Role {
	case "ceiling":
		err = runCeiling(ctx, spec)
	case "poll":
		err = runPoll(ctx, spec)
	case "walbox-inproc":
		err = runInProcess(ctx, spec)
	default:
		err = fmt.Errorf("unknown role %q", spec.Role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "walbox-bench %s: %v\n", spec.Role, err)
		return 1
	}
	return 0
}

// process is a relay or a short command run by the benchmark, started by the harness's one
// process starter (in a process group of its own, killed by the kernel should the benchmark
// die), its output in a log file.
type process struct{ *testenv.Process }

// start runs bin with args and extra environment, its output going to dir/<name>.log.
func start(dir, name, bin string, env []string, args ...string) (*process, error) {
	p, err := testenv.SpawnLogged(dir, name, bin, env, args...)
	if err != nil {
		return nil, err
	}
	return &process{p}, nil
}

// startChild runs this program again in the role of spec.
func startChild(dir, name string, spec childSpec) (*process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own binary: %w", err)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode child spec: %w", err)
	}
	return start(dir, name, self, []string{childEnv + "=" + string(data)})
}

func (p *process) pid() int { return p.PID() }

// alive returns an error once the process has exited.
func (p *process) alive() error {
	if st := p.State(); st != nil {
		return fmt.Errorf("%s exited: %v%s", p.Name(), st, p.Tail(20))
	}
	return nil
}

// wait waits up to timeout for the process to exit by itself and reports whether it succeeded.
func (p *process) wait(timeout time.Duration) error {
	if !p.Wait(timeout) {
		p.Kill()
		return fmt.Errorf("%s still running after %v; killed it%s", p.Name(), timeout, p.Tail(20))
	}
	return p.ExitErr()
}

// stop sends SIGTERM and waits up to timeout for a graceful exit, then kills the process group.
func (p *process) stop(timeout time.Duration) error { return p.Stop(timeout) }

// kill SIGKILLs the process group and waits for the exit.
func (p *process) kill() { p.Kill() }

// count returns how many lines of the process's log contain s.
func (p *process) count(s string) int {
	data, err := os.ReadFile(p.Log())
	if err != nil {
		return 0
	}
	return strings.Count(string(data), s)
}
