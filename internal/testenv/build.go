package testenv

import (
	"fmt"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// module is the import path of this module, prefixed to the packages Build builds.
const module = "github.com/walbox/walbox/"

const buildTimeout = 10 * time.Minute

// builds caches the binaries of this test binary, by package and flags.
var (
	buildsMu sync.Mutex
	builds   = map[string]*build{}
)

type build struct {
	once sync.Once
	bin  string
	err  error
}

// submodules are the repository's modules besides walbox's own, by folder: the harness and the
// examples. Build builds their packages from their own folder.
var submodules = []string{"test", "examples"}

// repoRoot is the repository's top folder, two above this file's.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Build returns the path of a binary built from the repository's package pkg (e.g. "cmd/walbox",
// "examples/cmd/demo")
// with the go build flags (e.g. "-race"). Each package and set of flags is built once per test
// binary, on first use, into a directory Main removes; a failed build fails every test that asks
// for it.
func Build(tb testing.TB, pkg string, flags ...string) string {
	tb.Helper()
	key := pkg + " " + strings.Join(flags, " ")
	buildsMu.Lock()
	b := builds[key]
	if b == nil {
		b = &build{}
		builds[key] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() { b.bin, b.err = goBuild(pkg, flags) })
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.bin
}

func goBuild(pkg string, flags []string) (string, error) {
	dir, err := makeDir("bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, path.Base(pkg))
	args := append(append([]string{"build"}, flags...), "-o", bin, module+pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot()
	for _, m := range submodules {
		if strings.HasPrefix(pkg, m+"/") {
			cmd.Dir = filepath.Join(cmd.Dir, m)
		}
	}
	if out, err := run("go build", cmd, scaled(buildTimeout)); err != nil {
		return "", fmt.Errorf("testenv: go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}
