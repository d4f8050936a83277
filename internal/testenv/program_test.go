package testenv_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// A program's output is readable while it runs, and SIGTERM ends it with its own exit code.
func TestProgramStopReturnsTheExitCode(t *testing.T) {
	t.Parallel()
	p := testenv.Start(t, exec.Command("sh", "-c", `trap 'echo stopping; exit 3' TERM; echo ready; while :; do sleep 0.05; done`))
	p.WaitFor("ready", 10*time.Second, func() bool { return strings.Contains(p.Output(), "ready") })
	if p.Exited() {
		t.Fatal("exited before SIGTERM")
	}
	if code := p.Stop(10 * time.Second); code != 3 {
		t.Errorf("exit code %d after SIGTERM, want 3", code)
	}
	if out := p.Output(); !strings.Contains(out, "stopping") {
		t.Errorf("output %q lacks what the program wrote on SIGTERM", out)
	}
}

// Kill takes the program's whole process group with it, as a crash would.
func TestProgramKillTakesItsGroup(t *testing.T) {
	t.Parallel()
	p := testenv.Start(t, exec.Command("sh", "-c", `sleep 60 & echo $!; wait`))
	var child int
	p.WaitFor("the child's pid", 10*time.Second, func() bool {
		n, err := strconv.Atoi(strings.TrimSpace(p.Output()))
		child = n
		return err == nil
	})
	p.Kill()
	if !p.Exited() || p.ExitCode() != -1 {
		t.Errorf("after Kill: exited %t, exit code %d; want true, -1", p.Exited(), p.ExitCode())
	}
	assertGone(t, []int{child})
}

func TestRun(t *testing.T) {
	t.Parallel()
	out, code := testenv.Run(t, exec.Command("sh", "-c", "echo out; echo err >&2; exit 4"), 10*time.Second)
	if code != 4 || !strings.Contains(out, "out") || !strings.Contains(out, "err") {
		t.Errorf("got exit code %d, output %q; want 4 and both lines", code, out)
	}
	start := time.Now()
	if _, code := testenv.Run(t, exec.Command("sleep", "60"), 100*time.Millisecond); code != -1 {
		t.Errorf("a command past its timeout reported %d, want -1", code)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a command past its 100 ms timeout took %v to end", took)
	}
}

// Exec returns a command's output, names a failed exit, and kills the command's process group
// when its context ends.
func TestExec(t *testing.T) {
	t.Parallel()
	out, err := testenv.Exec(context.Background(), "sh", exec.Command("sh", "-c", "echo out; echo err >&2; exit 4"))
	if err == nil || !strings.Contains(err.Error(), "exit status 4") || !strings.Contains(out, "out") || !strings.Contains(out, "err") {
		t.Errorf("got output %q, error %v; want both lines and exit status 4", out, err)
	}
	cause := errors.New("enough")
	ctx, cancel := context.WithCancelCause(context.Background())
	cmd := exec.Command("sh", "-c", `sleep 60 & echo $!; wait`)
	done := make(chan struct{})
	go func() {
		defer close(done)
		out, err = testenv.Exec(ctx, "sh", cmd)
	}()
	time.Sleep(200 * time.Millisecond)
	cancel(cause)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Exec did not return within 10 s of its context ending")
	}
	if !errors.Is(err, cause) || cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != -1 {
		t.Errorf("after the context ended: error %v, state %v; want the cause and a killed command", err, cmd.ProcessState)
	}
	if child, err := strconv.Atoi(strings.TrimSpace(out)); err == nil {
		assertGone(t, []int{child})
	} else {
		t.Errorf("no child pid in %q", out)
	}
}

// Short follows -test.short when not under CI.
func TestShort(t *testing.T) {
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); !ci && testenv.Short() != testing.Short() {
		t.Errorf("Short() = %t, testing.Short() = %t", testenv.Short(), testing.Short())
	}
}

func TestTail(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"a\nb\n", "a\nb"},
		{"a\nb\nc\nd\n", "... (2 lines before)\nc\nd"},
	} {
		if got := testenv.Tail(c.in, 2); got != c.want {
			t.Errorf("Tail(%q, 2) = %q, want %q", c.in, got, c.want)
		}
	}
}

// A binary is built once per test binary and package and flags.
func TestBuildOnce(t *testing.T) {
	if testenv.Short() {
		t.Skip("builds cmd/walbox; skipped with -short")
	}
	first := testenv.Build(t, "cmd/walbox")
	if second := testenv.Build(t, "cmd/walbox"); second != first {
		t.Errorf("second build at %s, first at %s; want one build", second, first)
	}
	if fi, err := os.Stat(first); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("no executable at %s: %v", first, err)
	}
	if other := testenv.Build(t, "cmd/walbox", "-tags", "otel"); other == first {
		t.Errorf("the build with other flags is the same file %s", other)
	}
}

// BuildIn builds a package of another module in that module's folder, into the folder it is given.
func TestBuildInAnotherModule(t *testing.T) {
	if testenv.Short() {
		t.Skip("builds examples/cmd/notifier; skipped with -short")
	}
	dir := t.TempDir()
	bin, err := testenv.BuildIn(context.Background(), dir, "examples/cmd/notifier")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(bin); err != nil || fi.Mode()&0o111 == 0 || filepath.Dir(bin) != dir || filepath.Base(bin) != "notifier" {
		t.Fatalf("no executable notifier in %s at %s: %v", dir, bin, err)
	}
}
