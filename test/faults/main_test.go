package faults_test

import (
	"flag"
	"os"
	"strconv"
	"testing"

	"github.com/walbox/walbox/internal/testenv"
)

var soakFlag = flag.Bool("soak", false, "run the long soak variants (also WALBOX_SOAK=1)")

func TestMain(m *testing.M) {
	flag.Parse()
	code := testenv.Main(m)
	if !printSoakSummary(os.Stdout) && code == 0 {
		code = 1 // a cell recorded a loss or a phantom
	}
	os.Exit(code)
}

// walboxBin returns the walbox binary under test: WALBOX_FAULTS_BIN if set (a binary built
// elsewhere, e.g. from another revision), else one race-built like the rest of the suite, so
// that a data race in the relay under faults fails the test.
func walboxBin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("WALBOX_FAULTS_BIN"); bin != "" {
		return bin
	}
	return testenv.Build(t, "cmd/walbox", "-race")
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
