package testenv_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/walbox/walbox/internal/testenv"
)

// A chroot build that fails after debootstrap (its packages do not install) leaves nothing in the
// cache but the lock file: no root that looks finished, no build directory, nothing mounted.
func TestChrootBuildFailingMidwayLeavesNothing(t *testing.T) {
	count := fakeChrootTools(t, "exit 1")
	cache := chrootCache(t)
	if _, err := testenv.ChrootRoot("walboxfail", []string{"no-such-package"}, t.Logf); err == nil {
		t.Fatal("a chroot whose packages failed to install was returned as built")
	}
	if got := builds(t, count); got != 1 {
		t.Fatalf("debootstrap ran %d times, want 1", got)
	}
	entries, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got, want := strings.Join(names, " "), "walboxfail.lock"; got != want {
		t.Errorf("the cache holds %q after a failed build, want %q", got, want)
	}
	if m := mountsBelow(cache); len(m) > 0 {
		t.Errorf("still mounted after a failed build: %v", m)
	}
}

// Test binaries that ask for the same chroot at the same time build it once and share it.
func TestChrootBuiltOnceByConcurrentBinaries(t *testing.T) {
	if os.Getenv("WALBOX_TESTENV_CHROOT_CHILD") != "" {
		t.Skip("already the child")
	}
	count := fakeChrootTools(t, "exit 0")
	chrootCache(t)
	const binaries = 3
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for range binaries {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChrootChild$", "-test.v")
		cmd.Env = append(os.Environ(), "WALBOX_TESTENV_CHROOT_CHILD=1")
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	roots := map[string]bool{}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, outs[i])
		}
		sc := bufio.NewScanner(strings.NewReader(outs[i].String()))
		for sc.Scan() {
			if root, ok := strings.CutPrefix(sc.Text(), "ROOT "); ok {
				roots[root] = true
			}
		}
	}
	if len(roots) != 1 {
		t.Fatalf("the children got roots %v, want one shared root", roots)
	}
	if got := builds(t, count); got != 1 {
		t.Errorf("%d test binaries built the chroot %d times, want once", binaries, got)
	}
}

func TestChrootChild(t *testing.T) {
	if os.Getenv("WALBOX_TESTENV_CHROOT_CHILD") == "" {
		t.Skip("run by TestChrootBuiltOnceByConcurrentBinaries")
	}
	root, err := testenv.ChrootRoot("walboxonce", nil, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ROOT %s\n", root)
}

// fakeChrootTools puts a debootstrap that makes a bare root in a second and counts its runs, and
// a chroot whose script is chrootScript, first on PATH. It returns the file of the count.
func fakeChrootTools(t *testing.T, chrootScript string) string {
	t.Helper()
	if why := cannotMount(t); why != "" {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("a chroot build mounts /proc and /dev (CI=true): %s", why)
		}
		t.Skipf("a chroot build mounts /proc and /dev: %s", why)
	}
	bin := t.TempDir()
	count := filepath.Join(bin, "count")
	debootstrap := "#!/bin/sh\n# --variant=minbase suite root mirror [script]\n" +
		`mkdir -p "$3/etc" "$3/proc" "$3/dev" && echo test > "$3/etc/debian_version" && echo "$3" >> ` + count + "\nsleep 1\n"
	for name, script := range map[string]string{"debootstrap": debootstrap, "chroot": "#!/bin/sh\n" + chrootScript + "\n"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(testenv.EnvDebianMirror, "http://127.0.0.1:9/debian")
	return count
}

// cannotMount says why this process cannot mount, as a chroot build does: not root, or root in
// a container without the right to mount.
func cannotMount(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		return "not root"
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
		return fmt.Sprintf("mount: %v", err)
	}
	_ = syscall.Unmount(dir, syscall.MNT_DETACH)
	return ""
}

// chrootCache points the chroot cache at a new directory, removed with testenv.RemoveTree, which
// unmounts first: a /dev bound below it must never be emptied.
func chrootCache(t *testing.T) string {
	t.Helper()
	cache, err := os.MkdirTemp("", "walbox-chroot-cache-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := testenv.RemoveTree(cache); err != nil {
			t.Error(err)
		}
	})
	t.Setenv(testenv.EnvChrootCache, cache)
	return cache
}

// builds counts the debootstrap runs recorded in count.
func builds(t *testing.T, count string) int {
	t.Helper()
	data, err := os.ReadFile(count)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return len(strings.Fields(string(data)))
}

// mountsBelow lists the mount points under dir.
func mountsBelow(dir string) []string {
	data, _ := os.ReadFile("/proc/self/mounts")
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 1 && (f[1] == dir || strings.HasPrefix(f[1], dir+"/")) {
			out = append(out, f[1])
		}
	}
	return out
}
