package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvChrootCache overrides the directory of the cached Debian root file systems (default:
// walbox/chroots under the user's cache directory).
const EnvChrootCache = "WALBOX_TEST_CHROOT_CACHE"

// A release is a Debian suite with the server packages a chroot of it holds.
type release struct {
	suite    string
	packages []string
}

// The releases other servers come from; the machine's own (bookworm) runs PostgreSQL 15 and
// RabbitMQ 3.10 without a chroot. Bullseye has the older PostgreSQL 13.
var (
	bullseye = release{"bullseye", []string{"postgresql-13"}}
	trixie   = release{"trixie", []string{"postgresql-17", "rabbitmq-server"}}
	forky    = release{"forky", []string{"postgresql-18"}}
)

// chrootSetup runs in a fresh root before the packages go in: no service starts, no main cluster
// is created, and apt installs no recommended packages.
const chrootSetup = `printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d &&
mkdir -p /etc/postgresql-common && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf &&
printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' > /etc/apt/apt.conf.d/90walbox`

// chrootBuildTimeout bounds one build: debootstrap and the packages take about a minute and a half.
const chrootBuildTimeout = 15 * time.Minute

// chroots are the chroots of this process, by suite.
var (
	chrootsMu sync.Mutex
	chroots   = map[string]*chroot{}
)

type chroot struct {
	mu   sync.Mutex // held while it is found or built
	root string     // "" until ready
}

// chrootCache returns the directory of the cached root file systems.
func chrootCache() (string, error) {
	if dir := os.Getenv(EnvChrootCache); dir != "" {
		return dir, nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "walbox", "chroots"), nil
}

// requireChroot returns the root of rel's chroot, building it on first use. Outside CI a machine
// that cannot build one (not root, no debootstrap) skips the test; under CI=true that, and any
// failed build, fails it.
func requireChroot(tb TB, rel release) string {
	tb.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "a chroot needs root"
	} else if _, err := exec.LookPath("debootstrap"); err != nil {
		why = "debootstrap not found; install it (.ci/install-deps.sh)"
	}
	if why != "" {
		if inCI() {
			tb.Fatalf("testenv: %s server from Debian %s (CI=true): %s", strings.Join(rel.packages, ", "), rel.suite, why)
		}
		tb.Skipf("testenv: %s server from Debian %s: %s", strings.Join(rel.packages, ", "), rel.suite, why)
	}
	root, err := chrootRoot(rel, tb.Logf)
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return root
}

// chrootRoot returns rel's root file system, built once per machine: under a lock file, so that
// test binaries building at the same time build it once, and into a temporary directory renamed
// when complete, so that an interrupted build leaves nothing that looks finished. /proc is mounted
// in it (RabbitMQ reads it) and stays mounted.
func chrootRoot(rel release, logf func(string, ...any)) (string, error) {
	chrootsMu.Lock()
	c := chroots[rel.suite]
	if c == nil {
		c = &chroot{}
		chroots[rel.suite] = c
	}
	chrootsMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.root != "" {
		return c.root, nil
	}
	cache, err := chrootCache()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(cache, rel.suite+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	root := filepath.Join(cache, rel.suite+"-"+rel.key())
	if _, err := os.Stat(filepath.Join(root, "etc", "debian_version")); err != nil {
		removeStaleBuilds(cache, rel.suite)
		start := time.Now()
		if err := buildChroot(rel, cache, root); err != nil {
			return "", fmt.Errorf("build the Debian %s chroot: %w", rel.suite, err)
		}
		logf("testenv: built the Debian %s chroot (%s) in %v", rel.suite, strings.Join(rel.packages, ", "), time.Since(start).Round(time.Second))
	}
	if err := mountProc(root); err != nil {
		return "", err
	}
	now := time.Now()
	_ = os.Chtimes(root, now, now) // marks it used
	removeUnused(cache, rel.suite, root)
	c.root = root
	return root, nil
}

// key names a build by everything it is made of.
func (rel release) key() string {
	h := sha256.New()
	for _, p := range append([]string{rel.suite, chrootSetup}, rel.packages...) {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// lockFile takes an exclusive lock on path, waiting for it.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil // closing releases the lock
}

// removeStaleBuilds removes what interrupted builds of suite left; the caller holds its lock, so
// no build of it is under way. Programs of a build whose test binary was killed may still run in
// it (debootstrap, apt, dpkg): they are killed first.
func removeStaleBuilds(cache, suite string) {
	dirs, _ := filepath.Glob(filepath.Join(cache, suite+".build-*"))
	for _, d := range dirs {
		for _, pid := range procsIn(d) {
			killPid(pid, 5*time.Second)
		}
		_ = RemoveTree(d)
	}
}

// unusedFor is how long a chroot of another build of a suite may go unused before it is removed.
const unusedFor = 14 * 24 * time.Hour

// removeUnused removes the chroots of suite, other than root, that no run used for a while: those
// of an older package list or setup.
func removeUnused(cache, suite, root string) {
	dirs, _ := filepath.Glob(filepath.Join(cache, suite+"-*"))
	for _, d := range dirs {
		if info, err := os.Stat(d); err == nil && d != root && info.IsDir() && time.Since(info.ModTime()) > unusedFor {
			_ = RemoveTree(d)
		}
	}
}

// procsIn lists the processes whose root directory is below dir or whose command line names it.
func procsIn(dir string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		root, _ := os.Readlink(filepath.Join("/proc", e.Name(), "root"))
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.HasPrefix(root, dir+"/") || root == dir || strings.Contains(string(cmdline), dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// buildChroot debootstraps rel's suite and installs its packages in a temporary directory, then
// renames the root to its place.
func buildChroot(rel release, cache, root string) error {
	mirror, err := DebianMirror()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), chrootBuildTimeout)
	defer cancel()
	work, err := os.MkdirTemp(cache, rel.suite+".build-")
	if err != nil {
		return err
	}
	defer func() { _ = RemoveTree(work) }()
	tmp := filepath.Join(work, "root")
	if err := Debootstrap(ctx, rel.suite, tmp, mirror); err != nil {
		return err
	}
	if err := installPackages(ctx, tmp, rel.packages); err != nil {
		return err
	}
	return os.Rename(tmp, root)
}

// installPackages installs packages in root with /proc and /dev mounted for their scripts, and
// unmounts them again.
func installPackages(ctx context.Context, root string, packages []string) error {
	for _, m := range []struct{ src, dir, fstype string }{{"proc", "proc", "proc"}, {"/dev", "dev", ""}} {
		target := filepath.Join(root, m.dir)
		flags := uintptr(0)
		if m.fstype == "" {
			flags = syscall.MS_BIND
		}
		if err := syscall.Mount(m.src, target, m.fstype, flags, ""); err != nil {
			return fmt.Errorf("mount %s in the chroot: %w", m.src, err)
		}
		defer func() { _ = syscall.Unmount(target, syscall.MNT_DETACH) }()
	}
	// A suite in development (forky) has a Release file valid for a week only; a mirror that lags
	// behind serves an expired one, which is good enough for test servers.
	script := chrootSetup + " && apt-get -o Acquire::Check-Valid-Until=false update -qq && apt-get install -y -qq " +
		strings.Join(packages, " ") + " && apt-get clean"
	cmd := exec.CommandContext(ctx, "chroot", root, "/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("install %s: %w\n%s", strings.Join(packages, " "), err, lastLines(string(out), 20))
	}
	return nil
}

// mountProc mounts proc at root/proc unless it is mounted there already.
func mountProc(root string) error {
	if _, err := os.Stat(filepath.Join(root, "proc", "self")); err == nil {
		return nil
	}
	if err := syscall.Mount("proc", filepath.Join(root, "proc"), "proc", 0, ""); err != nil {
		return fmt.Errorf("mount proc in %s: %w", root, err)
	}
	return nil
}

// chrootCred returns the uid and gid of name in root's /etc/passwd.
func chrootCred(root, name string) (*syscall.Credential, error) {
	data, err := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 4 && f[0] == name {
			uid, err1 := strconv.Atoi(f[2])
			gid, err2 := strconv.Atoi(f[3])
			if err1 != nil || err2 != nil {
				break
			}
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
		}
	}
	return nil, fmt.Errorf("no user %s in %s", name, root)
}

// inRoot returns path as a process chrooted to root sees it.
func inRoot(root, path string) string {
	if root == "" {
		return path
	}
	return "/" + strings.TrimLeft(strings.TrimPrefix(path, root), "/")
}

// chrootTmp is the directory, inside root, that holds instance directories of servers run there.
func chrootTmp(root string) string { return filepath.Join(root, "tmp") }
