package testenv

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Program is a program under test (walbox run, an example service) started by Start. Like the
// servers, it runs in a process group of its own and gets SIGKILL from the kernel should the
// test binary die.
type Program struct {
	tb   TB
	name string // the binary's name and arguments, for messages
	proc *Process
	log  *Log
}

// Start starts cmd with its output going to the program's log. At cleanup it kills the program;
// the test fails if the race detector reported a data race in it, and a failed test logs the
// tail of the program's output.
func Start(tb TB, cmd *exec.Cmd) *Program {
	tb.Helper()
	p := &Program{tb: tb, name: strings.Join(append([]string{filepath.Base(cmd.Path)}, cmd.Args[1:]...), " "), log: &Log{}}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	proc, err := Spawn(p.name, cmd)
	if err != nil {
		tb.Fatal(err)
	}
	p.proc = proc
	tb.Cleanup(p.cleanup)
	return p
}

func (p *Program) cleanup() {
	p.Kill()
	out := p.Output()
	if strings.Contains(out, "WARNING: DATA RACE") {
		bug := "BUG"
		if strings.HasPrefix(p.name, "walbox") {
			bug = "RELAY BUG"
		}
		p.tb.Errorf("%s: the race detector reported a data race in %s:\n%s", bug, p.name, out)
	} else if p.tb.Failed() {
		p.tb.Logf("%s (pid %d) output:\n%s", p.name, p.PID(), Tail(out, 100))
	}
}

// Output returns everything the program wrote to stdout and stderr so far.
func (p *Program) Output() string { return p.log.String() }

// PID returns the program's process id.
func (p *Program) PID() int { return p.proc.PID() }

// Exited reports whether the program has exited.
func (p *Program) Exited() bool { return p.proc.Exited() }

// Signal sends sig to the program unless it has exited.
func (p *Program) Signal(sig syscall.Signal) { p.proc.Signal(sig) }

// Kill SIGKILLs the program's process group, as in a crash, and waits for the program to exit.
func (p *Program) Kill() { p.proc.Kill() }

// Wait waits up to timeout for the program to exit and returns its exit code; a program still
// running then fails the test.
func (p *Program) Wait(timeout time.Duration) int {
	p.tb.Helper()
	if !p.proc.Wait(timeout) {
		p.tb.Fatalf("%s still running after %v:\n%s", p.name, timeout, Tail(p.Output(), 40))
	}
	return p.ExitCode()
}

// Stop sends SIGTERM and returns the exit code, as Wait does with timeout; a program that does
// not exit in time is killed and fails the test.
func (p *Program) Stop(timeout time.Duration) int {
	p.tb.Helper()
	p.Signal(syscall.SIGTERM)
	if !p.proc.Wait(timeout) {
		p.Kill()
		p.tb.Fatalf("%s did not exit within %v of SIGTERM; killed it:\n%s", p.name, timeout, Tail(p.Output(), 40))
	}
	return p.ExitCode()
}

// ExitCode returns the exit code of a program that exited: -1 if a signal ended it.
func (p *Program) ExitCode() int {
	<-p.proc.done
	return p.proc.cmd.ProcessState.ExitCode()
}

// WaitFor polls ready until it holds and returns how long that took. The test fails if the
// program exits first or timeout passes; what names the awaited condition in the message.
func (p *Program) WaitFor(what string, timeout time.Duration, ready func() bool) time.Duration {
	p.tb.Helper()
	start := time.Now()
	for !ready() {
		if p.Exited() {
			p.tb.Fatalf("%s exited while waiting for %s:\n%s", p.name, what, Tail(p.Output(), 40))
		}
		if time.Since(start) > timeout {
			p.tb.Fatalf("no %s after %v:\n%s", what, timeout, Tail(p.Output(), 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// Run runs cmd to completion with Exec and returns its combined output and exit code. A command
// still running after timeout is killed and reports -1, as exec.CommandContext would.
func Run(tb TB, cmd *exec.Cmd, timeout time.Duration) (string, int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := Exec(ctx, filepath.Base(cmd.Path), cmd)
	if cmd.ProcessState == nil {
		tb.Fatal(err)
	}
	return out, cmd.ProcessState.ExitCode()
}
