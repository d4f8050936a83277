package dockerenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// modules are the folders of the repository's Go modules, whose tests the image runs: walbox's
// own, the harness's, the examples' and otel's (a test builds the walbox with tracing from it, and
// the walbox Dockerfile downloads its modules).
var modules = []string{".", "test", "examples", "otel"}

// goInputs returns what the Go image is made of besides its Dockerfile, for its key (the
// toolchain's version, every module's go.sum and the packages the tests depend on), and the
// toolchain's root.
func (b *Builder) goInputs(ctx context.Context) (key []string, dirs map[string]string, err error) {
	goroot, err := b.goCmd(ctx, nil, "env", "GOROOT")
	if err != nil {
		return nil, nil, err
	}
	version, err := b.goCmd(ctx, nil, "env", "GOVERSION")
	if err != nil {
		return nil, nil, err
	}
	key = []string{version}
	for _, m := range modules {
		sum, err := os.ReadFile(filepath.Join(b.Repo, m, "go.sum"))
		if err != nil {
			return nil, nil, err
		}
		key = append(key, string(sum))
	}
	deps, err := b.dependencies(ctx)
	if err != nil {
		return nil, nil, err
	}
	return append(key, deps), map[string]string{"go": goroot}, nil
}

// dependencies lists the packages outside walbox's module that its tests build, one a line. The
// image compiles them ahead; the other modules' tests (and the otel module's walbox, which a test
// builds) compile what they add at test time.
func (b *Builder) dependencies(ctx context.Context) (string, error) {
	out, err := b.goCmd(ctx, nil, "list", "-deps", "-test",
		"-f", "{{if not .Module}}{{.ImportPath}}{{else if not .Module.Main}}{{.ImportPath}}{{end}}", "./...")
	if err != nil {
		return "", err
	}
	var pkgs []string
	for _, p := range strings.Fields(out) {
		if !strings.Contains(p, ".test") && !strings.HasPrefix(p, "vendor/") && !strings.Contains(p, "/internal/") {
			pkgs = append(pkgs, p)
		}
	}
	return strings.Join(pkgs, "\n"), nil
}

// goBuild holds the directories a Go image build copies in: the toolchain, a module cache with
// exactly the module's dependencies, and go.mod, go.sum and the package list to compile ahead.
type goBuild struct {
	dirs map[string]string
	tmp  string
}

func (g goBuild) cleanup() {
	// The module cache is read-only; let go remove it.
	clean := exec.Command("go", "clean", "-modcache")
	clean.Env = append(os.Environ(), "GOMODCACHE="+filepath.Join(g.tmp, "mod"))
	_ = clean.Run()
	_ = os.RemoveAll(g.tmp)
}

// goContext fills a module cache from the local one, for every module of the repository, and
// writes the warm-up files. The image's `go mod download` (the Dockerfile's) reads the go.mod of
// every module in the graph, which the local builds need not have fetched: the local cache gets
// them first, from the usual proxy.
func (b *Builder) goContext(ctx context.Context, dirs map[string]string) (goBuild, error) {
	for _, m := range modules {
		if _, err := b.goCmdIn(ctx, m, nil, "mod", "download"); err != nil {
			return goBuild{}, err
		}
	}
	tmp, err := os.MkdirTemp("", "walbox-goimage-")
	if err != nil {
		return goBuild{}, err
	}
	g := goBuild{dirs: map[string]string{"go": dirs["go"], "mod": filepath.Join(tmp, "mod"), "warm": filepath.Join(tmp, "warm")}, tmp: tmp}
	local, err := b.goCmd(ctx, nil, "env", "GOMODCACHE")
	if err != nil {
		g.cleanup()
		return goBuild{}, err
	}
	for _, m := range modules {
		if _, err := b.goCmdIn(ctx, m, []string{"GOMODCACHE=" + g.dirs["mod"], "GOPROXY=file://" + filepath.Join(local, "cache", "download"),
			"GOSUMDB=off", "GOFLAGS=-mod=mod"}, "mod", "download"); err != nil {
			g.cleanup()
			return goBuild{}, err
		}
	}
	deps, err := b.dependencies(ctx)
	if err == nil {
		err = os.MkdirAll(g.dirs["warm"], 0o755)
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if err == nil {
			var data []byte
			if data, err = os.ReadFile(filepath.Join(b.Repo, f)); err == nil {
				err = os.WriteFile(filepath.Join(g.dirs["warm"], f), data, 0o644)
			}
		}
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(g.dirs["warm"], "packages"), []byte(deps+"\n"), 0o644)
	}
	if err != nil {
		g.cleanup()
		return goBuild{}, err
	}
	return g, nil
}

func (b *Builder) goCmd(ctx context.Context, env []string, args ...string) (string, error) {
	return b.goCmdIn(ctx, ".", env, args...)
}

// goCmdIn runs go in the folder of the module m.
func (b *Builder) goCmdIn(ctx context.Context, m string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = filepath.Join(b.Repo, m)
	cmd.Env = append(os.Environ(), env...)
	return output(cmd)
}
