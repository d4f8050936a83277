package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is a server started by the harness. It runs in its own process
// group and receives SIGKILL if the test binary dies (Pdeathsig), so a
// crashed or killed test run does not leave it behind.
type process struct {
	name string
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

// startProcess starts cmd in a new process group and tracks it until reaped.
func startProcess(name string, cmd *exec.Cmd) (*process, error) {
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
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	track(p)
	go func() {
		_ = cmd.Wait()
		untrack(p)
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process itself (not its group) unless it was reaped.
func (p *process) signal(sig syscall.Signal) {
	if !p.exited() {
		_ = syscall.Kill(p.pid(), sig)
	}
}

// wait reports whether the process exited within d.
func (p *process) wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// kill sends SIGKILL to the whole process group and waits for the reap.
// The group id stays reserved while any member lives, so signalling it is
// safe even after the leader was reaped; the leader's pid is not.
func (p *process) kill() {
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	if !p.exited() {
		_ = syscall.Kill(p.pid(), syscall.SIGKILL)
	}
	<-p.done
}

// live processes, for Main's signal handler and final sweep.
var (
	liveMu sync.Mutex
	live   = map[*process]struct{}{}
)

func track(p *process) {
	liveMu.Lock()
	live[p] = struct{}{}
	liveMu.Unlock()
}

func untrack(p *process) {
	liveMu.Lock()
	delete(live, p)
	liveMu.Unlock()
}

// killAll kills every process the harness started and has not reaped yet.
func killAll() {
	liveMu.Lock()
	ps := make([]*process, 0, len(live))
	for p := range live {
		ps = append(ps, p)
	}
	liveMu.Unlock()
	for _, p := range ps {
		p.kill()
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

// run runs a short-lived command like startProcess and returns its combined
// output; after timeout it kills the command's process group.
func run(name string, cmd *exec.Cmd, timeout time.Duration) (string, error) {
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second // don't wait for a daemon (epmd) holding the pipe
	proc, err := startProcess(name, cmd)
	if err != nil {
		return "", err
	}
	if !proc.wait(timeout) {
		proc.kill()
		return out.String(), fmt.Errorf("%s: timed out after %v", name, timeout)
	}
	if !proc.cmd.ProcessState.Success() {
		return out.String(), fmt.Errorf("%s: %v", name, proc.cmd.ProcessState)
	}
	return out.String(), nil
}
