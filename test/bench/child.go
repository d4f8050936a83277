package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
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

// A child gets SIGKILL when the thread that forked it exits (the parent-death signal), so every
// child is forked from one goroutine locked to a thread that lives as long as the program.
var (
	spawnOnce sync.Once
	spawnCh   = make(chan spawnReq)
)

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

func spawnLoop() {
	runtime.LockOSThread() // never unlocked
	for req := range spawnCh {
		req.err <- req.cmd.Start()
	}
}

// process is a relay or a short command run by the benchmark, in a process group of its own,
// killed by the kernel should the benchmark die.
type process struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs bin with args and extra environment, its output going to dir/<name>.log.
func start(dir, name, bin string, env []string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create %s log: %w", name, err)
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	spawnOnce.Do(func() { go spawnLoop() })
	req := spawnReq{cmd: cmd, err: make(chan error, 1)}
	spawnCh <- req
	if err := <-req.err; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
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

func (p *process) pid() int { return p.cmd.Process.Pid }

// alive returns an error once the process has exited.
func (p *process) alive() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v%s", p.name, p.cmd.ProcessState, p.tail(20))
	default:
		return nil
	}
}

// wait waits up to timeout for the process to exit by itself and reports whether it succeeded.
func (p *process) wait(timeout time.Duration) error {
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("%s still running after %v; killed it%s", p.name, timeout, p.tail(20))
	}
	if !p.cmd.ProcessState.Success() {
		return fmt.Errorf("%s: %v%s", p.name, p.cmd.ProcessState, p.tail(20))
	}
	return nil
}

// stop sends SIGTERM and waits up to timeout for a graceful exit, then kills the process group.
func (p *process) stop(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.exitErr()
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("%s did not stop within %v; killed it", p.name, timeout)
	}
	return p.exitErr()
}

func (p *process) exitErr() error {
	if p.cmd.ProcessState != nil && !p.cmd.ProcessState.Success() {
		return fmt.Errorf("%s: %v%s", p.name, p.cmd.ProcessState, p.tail(20))
	}
	return nil
}

// kill SIGKILLs the process group unless the process was reaped already (its group id may then
// belong to another process).
func (p *process) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.done
}

// count returns how many lines of the process's log contain s.
func (p *process) count(s string) int {
	data, err := os.ReadFile(p.log)
	if err != nil {
		return 0
	}
	return strings.Count(string(data), s)
}

// tail returns the last lines of the process's log, for error messages.
func (p *process) tail(lines int) string {
	data, err := os.ReadFile(p.log)
	if err != nil || len(data) == 0 {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return "\n" + strings.Join(all[max(0, len(all)-lines):], "\n")
}
