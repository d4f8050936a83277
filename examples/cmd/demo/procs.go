package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// buildBinaries builds the relay and the two services into dir.
func buildBinaries(ctx context.Context, dir string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator),
		"github.com/walbox/walbox/cmd/walbox",
		"github.com/walbox/walbox/examples/cmd/orders",
		"github.com/walbox/walbox/examples/cmd/notifier")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return nil
}

// A child gets SIGKILL when the thread that forked it exits (the parent-death signal), so
// every child is forked from one goroutine locked to a thread that lives as long as the demo.
var (
	spawnOnce sync.Once
	spawnCh   = make(chan spawnReq)
)

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

func spawnLoop() {
	runtime.LockOSThread()
	for req := range spawnCh {
		req.err <- req.cmd.Start()
	}
}

// child is a subprocess of the demo, in a process group of its own (Ctrl-C reaches the demo
// alone, which stops the children in order) and killed by the kernel should the demo die.
type child struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startChild starts bin with args and env, its output going to dir/<name>.log.
func startChild(dir, name, bin string, env []string, args ...string) (*child, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create %s log: %w", name, err)
	}
	defer logf.Close()
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
	c := &child{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to timeout for a graceful exit, then kills the process group.
func (c *child) stop(timeout time.Duration) {
	if !c.exited() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-c.done:
	case <-time.After(timeout):
		fmt.Fprintf(os.Stderr, "demo: %s did not stop within %v; killing it\n", c.name, timeout)
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL) // leftovers in its group, if any
	<-c.done
}

// tail returns the last lines of the child's log.
func (c *child) tail(lines int) string {
	data, err := os.ReadFile(c.log)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// runOnce runs bin to completion and returns an error with its output if it fails.
func runOnce(ctx context.Context, bin string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return nil
}
