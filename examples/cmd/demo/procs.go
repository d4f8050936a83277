package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// buildBinaries builds the relay and the two services into dir, each in its own module, with the
// harness's build.
func buildBinaries(ctx context.Context, dir string) error {
	for _, pkg := range []string{"cmd/walbox", "examples/cmd/orders", "examples/cmd/notifier"} {
		if _, err := testenv.BuildIn(ctx, dir, pkg); err != nil {
			return err
		}
	}
	return nil
}

// startChild starts bin with args and env, its output going to dir/<name>.log, through the
// harness's process starter: in a process group of its own (Ctrl-C reaches the demo alone,
// which stops the children in order), killed by the kernel should the demo die.
func startChild(dir, name, bin string, env []string, args ...string) (*testenv.Process, error) {
	return testenv.SpawnLogged(dir, name, bin, env, args...)
}

// stopChild sends SIGTERM and waits up to timeout for a graceful exit, then kills the process
// group; it says so if the child had to be killed or failed.
func stopChild(c *testenv.Process, timeout time.Duration) {
	if err := c.Stop(timeout); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
	}
}

// runOnce runs bin to completion, as startChild starts it, and returns an error with its output
// if it fails.
func runOnce(ctx context.Context, bin string, env []string, args ...string) error {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	name := strings.Join(append([]string{filepath.Base(bin)}, args...), " ")
	if out, err := testenv.Exec(ctx, name, cmd); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	return nil
}
