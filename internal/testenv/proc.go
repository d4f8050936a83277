package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a server or a program started by Spawn: the one way the harness, the demo and the
// benchmark start the servers, walbox, its migrate and the example services, whether they run
// to completion (Exec, Run) or until stopped (SpawnLogged, Start). It runs in its own process
// group and receives SIGKILL if the parent dies (Pdeathsig), so a crashed or killed parent does
// not leave it behind.
type Process struct {
	name string
	log  string // the file its output goes to; "" if the caller set Stdout and Stderr
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
}

// Pdeathsig fires when the thread that forked the child exits, not when the
// process does. All children are therefore forked from one goroutine locked
// to a thread that never exits.
var (
	spawnOnce sync.Once
	spawnCh   = make(chan spawnReq)
)

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

func spawnLoop() {
	runtime.LockOSThread() // never unlocked: the thread lives as long as the binary
	for req := range spawnCh {
		req.err <- req.cmd.Start()
	}
}

// Spawn starts cmd in a new process group and tracks it until reaped; Main's final sweep and
// signal handler kill it if it still runs.
func Spawn(name string, cmd *exec.Cmd) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	spawnOnce.Do(func() { go spawnLoop() })
	req := spawnReq{cmd: cmd, err: make(chan error, 1)}
	spawnCh <- req
	if err := <-req.err; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, done: make(chan struct{})}
	track(p)
	go func() {
		_ = cmd.Wait()
		untrack(p)
		close(p.done)
	}()
	return p, nil
}

// SpawnLogged starts bin with args and, besides this process's environment, env; its output goes
// to dir/<name>.log.
func SpawnLogged(dir, name, bin string, env []string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create %s log: %w", name, err)
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := Spawn(name, cmd)
	if err != nil {
		return nil, err
	}
	p.log = logPath
	return p, nil
}

// Name returns the name the process was started with.
func (p *Process) Name() string { return p.name }

// PID returns the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited and been reaped.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// State returns how the process exited; nil while it runs.
func (p *Process) State() *os.ProcessState {
	if !p.Exited() {
		return nil
	}
	return p.cmd.ProcessState
}

// Signal sends sig to the process itself (not its group) unless it was reaped.
func (p *Process) Signal(sig syscall.Signal) {
	if !p.Exited() {
		_ = syscall.Kill(p.PID(), sig)
	}
}

// Wait reports whether the process exited within d.
func (p *Process) Wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// Kill sends SIGKILL to the whole process group and waits for the reap.
// The group id stays reserved while any member lives, so signalling it is
// safe even after the leader was reaped; the leader's pid is not.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	if !p.Exited() {
		_ = syscall.Kill(p.PID(), syscall.SIGKILL)
	}
	<-p.done
}

// Stop sends SIGTERM and waits up to timeout for the process to exit, then kills its process
// group (leftovers too). It returns an error if the process had to be killed or did not exit
// successfully, with the tail of its log.
func (p *Process) Stop(timeout time.Duration) error {
	p.Signal(syscall.SIGTERM)
	exited := p.Wait(timeout)
	p.Kill()
	if !exited {
		return fmt.Errorf("%s did not stop within %v; killed it%s", p.name, timeout, p.Tail(20))
	}
	return p.ExitErr()
}

// ExitErr returns an error, with the tail of its log, if the process exited unsuccessfully.
func (p *Process) ExitErr() error {
	if st := p.State(); st != nil && !st.Success() {
		return fmt.Errorf("%s: %v%s", p.name, st, p.Tail(20))
	}
	return nil
}

// Log returns the path of the file the process's output goes to ("" if it has none).
func (p *Process) Log() string { return p.log }

// Tail returns the last lines of the process's log, after a newline; "" if it has none.
func (p *Process) Tail(lines int) string {
	if p.log == "" {
		return ""
	}
	data, err := os.ReadFile(p.log)
	if err != nil || len(data) == 0 {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return "\n" + strings.Join(all[max(0, len(all)-lines):], "\n")
}

// live processes, for Main's signal handler and final sweep.
var (
	liveMu sync.Mutex
	live   = map[*Process]struct{}{}
)

func track(p *Process) {
	liveMu.Lock()
	live[p] = struct{}{}
	liveMu.Unlock()
}

func untrack(p *Process) {
	liveMu.Lock()
	delete(live, p)
	liveMu.Unlock()
}

// killAll kills every process the harness started and has not reaped yet.
func killAll() {
	liveMu.Lock()
	ps := make([]*Process, 0, len(live))
	for p := range live {
		ps = append(ps, p)
	}
	liveMu.Unlock()
	for _, p := range ps {
		p.Kill()
	}
}

// pidAlive reports whether a process with this pid exists and is not a zombie.
func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no procfs: trust kill(2)
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// killPid SIGKILLs pid and waits up to d for it to disappear.
func killPid(pid int, d time.Duration) bool {
	if !pidAlive(pid) {
		return true
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !pidAlive(pid) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// logTail returns the last lines of the named files, for failure messages.
func logTail(paths ...string) string {
	const maxLines = 30
	var b strings.Builder
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > maxLines {
			lines = lines[len(lines)-maxLines:]
		}
		fmt.Fprintf(&b, "\n--- tail of %s ---\n%s", path, strings.Join(lines, "\n"))
	}
	return b.String()
}

// descendants lists the pids of all descendants of pid, from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid := parentPid(child); ppid > 0 {
			children[ppid] = append(children[ppid], child)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		next := children[queue[0]]
		queue = append(queue[1:], next...)
		out = append(out, next...)
	}
	return out
}

// parentPid reads the parent pid from /proc/<pid>/stat (0 if unknown).
func parentPid(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(stat[i+1:])) // state, ppid, ...
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// Exec runs cmd to completion, started as Spawn starts it, and returns its combined output. A
// command still running when ctx ends is killed with its process group and Exec returns ctx's
// cause; one that exits unsuccessfully returns an error naming its exit status. Unless the
// command failed to start, cmd.ProcessState then holds its exit code.
func Exec(ctx context.Context, name string, cmd *exec.Cmd) (string, error) {
	out := &Log{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = time.Second // don't wait for a daemon (epmd) holding the pipe
	proc, err := Spawn(name, cmd)
	if err != nil {
		return "", err
	}
	select {
	case <-proc.done:
	case <-ctx.Done():
		if !proc.Exited() {
			proc.Kill()
			return out.String(), fmt.Errorf("%s: %w", name, context.Cause(ctx))
		}
	}
	if !cmd.ProcessState.Success() {
		return out.String(), fmt.Errorf("%s: %v", name, cmd.ProcessState)
	}
	return out.String(), nil
}

// run runs a short-lived command with Exec; after timeout it kills the command's process group.
func run(name string, cmd *exec.Cmd, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeoutCause(context.Background(), timeout, fmt.Errorf("timed out after %v", timeout))
	defer cancel()
	return Exec(ctx, name, cmd)
}
