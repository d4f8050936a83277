package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

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

// repoRoot is the repository's top folder: two above this file's, as compiled in. A binary
// built with -trimpath, or run after the checkout moved, has no such folder; it then looks up
// from the working directory for the product module's go.mod.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	wd, _ := os.Getwd()
	return findRoot(filepath.Join(filepath.Dir(file), "..", ".."), wd)
}

// findRoot returns compiled if it is the product's top folder, else the nearest folder at or
// above wd that is, else compiled.
func findRoot(compiled, wd string) string {
	if isProductRoot(compiled) || wd == "" {
		return compiled
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if isProductRoot(dir) {
			return dir
		}
		if filepath.Dir(dir) == dir {
			return compiled
		}
	}
}

// isProductRoot reports whether dir holds the go.mod of module github.com/walbox/walbox.
func isProductRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	return err == nil && strings.HasPrefix(string(b), "module github.com/walbox/walbox\n")
}

// Build returns the path of a binary built by BuildIn from the repository's package pkg (e.g.
// "cmd/walbox", "examples/cmd/demo") with the go build flags (e.g. "-race"). Each package and
// set of flags is built once per test binary, on first use, into a directory Main removes; a
// failed build fails every test that asks for it.
func Build(tb TB, pkg string, flags ...string) string {
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
	bin, err := BuildIn(context.Background(), dir, pkg, flags...)
	if err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	return bin, nil
}

// BuildIn builds the repository's package pkg (e.g. "cmd/walbox", "examples/cmd/orders") with
// the go build flags into dir and returns the binary's path, dir/<pkg's last element>. The go
// command runs in the folder of pkg's module (the nearest one above pkg with a go.mod), started
// by Exec; a build that outlives ctx or the build timeout is killed.
func BuildIn(ctx context.Context, dir, pkg string, flags ...string) (string, error) {
	root := repoRoot()
	modDir := moduleDir(root, pkg)
	rel, err := filepath.Rel(modDir, filepath.Join(root, filepath.FromSlash(pkg)))
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, path.Base(pkg))
	args := append(append([]string{"build"}, flags...), "-o", bin, "./"+filepath.ToSlash(rel))
	cmd := exec.Command("go", args...)
	cmd.Dir = modDir
	timeout := scaled(buildTimeout)
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("timed out after %v", timeout))
	defer cancel()
	if out, err := Exec(ctx, "go", cmd); err != nil {
		return "", fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), modDir, err, out)
	}
	return bin, nil
}

// moduleDir returns the folder of the repository's module that holds package pkg: the nearest
// folder above it, up to the repository's top root, with a go.mod.
func moduleDir(root, pkg string) string {
	for dir := filepath.Join(root, filepath.FromSlash(pkg)); strings.HasPrefix(dir, root+string(filepath.Separator)); dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
	}
	return root
}
