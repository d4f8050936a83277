package testenv_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// TreeCPU counts a grandchild still running, and then, once it was waited for, through its parent.
func TestTreeCPUCountsDescendants(t *testing.T) {
	before := total(t)
	// A subshell burns CPU, says so, and waits: a grandchild of the test, not waited for yet.
	cmd, line := startShell(t, `(i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; echo burnt; sleep 30) & wait`)
	if line != "burnt" {
		t.Fatalf("read %q, want burnt", line)
	}
	running := total(t)
	grand := running - before
	if grand < 100*time.Millisecond {
		t.Fatalf("the tree used %v while a grandchild burnt CPU; want its CPU counted", grand)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()

	// A child that burnt CPU and was waited for counts through this process's cutime.
	start := total(t)
	child := exec.Command("sh", "-c", `i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done`)
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	after := total(t)
	used := child.ProcessState.UserTime() + child.ProcessState.SystemTime()
	t.Logf("grandchild running: %v; child waited for: %v, by its own count %v", grand, after-start, used)
	if after-start < used-20*time.Millisecond { // ticks of 10 ms, rounded down twice at most
		t.Errorf("the tree grew by %v over a child that used %v; want the child counted", after-start, used)
	}
}

// total is the CPU time of this process and its descendants, every command's.
func total(t *testing.T) time.Duration {
	t.Helper()
	cpu, err := testenv.TreeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var sum time.Duration
	for _, d := range cpu {
		sum += d
	}
	return sum
}

// A PostgreSQL backend's CPU counts under its role, apart from the server's own processes.
func TestTreeCPUNamesAPostgresBackend(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	if pg.External() {
		t.Skip("the server is not this test's child")
	}
	conn := pg.Conn(t, pg.NewDatabase(t)) // a backend that ended would count under the postmaster
	before, err := testenv.TreeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(context.Background(), "SELECT pg_catalog.count(*) FROM pg_catalog.generate_series(1, 3000000)"); err != nil {
		t.Fatal(err)
	}
	after, err := testenv.TreeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	used := after["postgres: backend"] - before["postgres: backend"]
	t.Logf("CPU by command: %v", after)
	if used < 100*time.Millisecond {
		t.Errorf("postgres: backend used %v over a query that counted 3,000,000 rows; want its CPU there", used)
	}
}

// PinTree binds a process's descendants too.
func TestPinTreeBindsDescendants(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs")
	}
	cmd, grandchild := startShell(t, `sleep 30 & echo $!; wait`)
	defer exec.Command("kill", grandchild).Run() //nolint:errcheck // gone already, at best
	if err := testenv.PinTree(cmd.Process.Pid, 1); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []string{strconv.Itoa(cmd.Process.Pid), grandchild} {
		status, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(status), "Cpus_allowed_list:\t1\n") {
			t.Errorf("process %s after PinTree to CPU 1:\n%s", pid, status)
		}
	}
}

// startShell starts sh running script and returns it with the first line it wrote. The test's end
// kills it.
func startShell(t *testing.T, script string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	line, err := bufio.NewReader(startPiped(t, cmd)).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return cmd, strings.TrimSpace(line)
}
