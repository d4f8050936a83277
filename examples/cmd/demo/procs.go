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

// buildBinaries builds the relay and the two services into dir: walbox in its own module, the
// services in the examples module, the one the demo runs in.
func buildBinaries(ctx context.Context, dir string) error {
	root, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/walbox/walbox").Output()
	if err != nil {
		return fmt.Errorf("find the walbox module (run the demo inside the examples module): %w", err)
	}
	builds := []struct {
		dir  string
		pkgs []string
	}{
		{strings.TrimSpace(string(root)), []string{"github.com/walbox/walbox/cmd/walbox"}},
		{"", []string{"github.com/walbox/walbox/examples/cmd/orders", "github.com/walbox/walbox/examples/cmd/notifier"}},
	}
	for _, b := range builds {
		cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", dir + string(filepath.Separator)}, b.pkgs...)...)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %w\n%s", err, out)
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

// runOnce runs bin to completion and returns an error with its output if it fails.
func runOnce(ctx context.Context, bin string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return nil
}
