package faults_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/walbox/walbox/internal/testenv"
)

var (
	soakFlag  = flag.Bool("soak", false, "run the long soak variants (also WALBOX_SOAK=1)")
	walboxBin string
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if testenv.Short() {
		return m.Run() // every test here skips
	}
	if bin := os.Getenv("WALBOX_FAULTS_BIN"); bin != "" {
		walboxBin = bin // a walbox binary built elsewhere, e.g. from another revision
		return testenv.Main(m)
	}
	dir, err := os.MkdirTemp("", "walbox-faults-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	walboxBin = filepath.Join(dir, "walbox")
	// Race-built like the rest of the suite: a data race in the relay under faults fails the test.
	build := exec.Command("go", "build", "-race", "-o", walboxBin, "github.com/walbox/walbox/cmd/walbox")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build walbox:", err)
		return 1
	}
	return testenv.Main(m)
}

// soaking reports whether the long variants run.
func soaking() bool {
	v, _ := strconv.ParseBool(os.Getenv("WALBOX_SOAK"))
	return *soakFlag || v
}

// heavy skips t in -short mode.
func heavy(t *testing.T) {
	t.Helper()
	if testenv.Short() {
		t.Skip("fault test: starts PostgreSQL, RabbitMQ and the walbox binary")
	}
}

// soakInt returns the integer in env if set, else soak when soaking, else ci.
func soakInt(env string, ci, soak int) int {
	if n, err := strconv.Atoi(os.Getenv(env)); err == nil && n > 0 {
		return n
	}
	if soaking() {
		return soak
	}
	return ci
}
