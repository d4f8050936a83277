package dockerenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// dirPrefix names the engine directories under os.TempDir, followed by the pid of the test
// binary that owns them, so a later run can remove what a crashed one left behind.
const dirPrefix = "walbox-docker-"

// Engine is a Docker daemon of the harness's own: its socket, data root, exec root and pid file
// live in one directory that Stop removes.
type Engine struct {
	Host   string // DOCKER_HOST for clients: unix://<dir>/docker.sock
	docker string // the client that came with the daemon
	dir    string
	cmd    *exec.Cmd
	done   chan struct{}
}

// StartEngine starts dockerd with its own directories and no iptables, bridge or userland proxy
// (published ports are not bound on the host; clients use container addresses), and returns once
// it answers. The daemon picks its storage driver: overlay2 where the directory's file system
// allows it, vfs (a full copy per layer, minutes slower) where not.
func StartEngine(ctx context.Context) (*Engine, error) {
	removeStale()
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		return nil, fmt.Errorf("dockerd: %w", err)
	}
	client := filepath.Join(filepath.Dir(dockerd), "..", "bin", "docker")
	if _, err := os.Stat(client); err != nil {
		if client, err = exec.LookPath("docker"); err != nil {
			return nil, fmt.Errorf("docker client: %w", err)
		}
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", dirPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("engine dir: %w", err)
	}
	e := &Engine{Host: "unix://" + filepath.Join(dir, "docker.sock"), docker: client, dir: dir, done: make(chan struct{})}
	log, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	e.cmd = exec.Command(dockerd,
		"--data-root", filepath.Join(dir, "data"),
		"--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "dockerd.pid"),
		"--host", e.Host,
		"--iptables=false", "--bridge=none", "--userland-proxy=false",
		"--cgroup-parent", filepath.Base(dir), // so that leftovers can be found and killed
		// dockerd starts a containerd of its own, unless the system's runs: then it uses that one,
		// and these keep its containers apart from the system daemon's.
		"--containerd-namespace", filepath.Base(dir), "--containerd-plugins-namespace", filepath.Base(dir)+"-plugins")
	e.cmd.Stdout, e.cmd.Stderr = log, log
	// Own process group, and SIGKILL if the test binary dies; its containers then stay behind
	// until a later StartEngine kills them and removes the directory.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := e.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start dockerd: %w", err)
	}
	go func() { _ = e.cmd.Wait(); close(e.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := e.Docker(ctx, "version", "--format", "{{.Server.Version}}"); err == nil {
			return e, nil
		}
		select {
		case <-e.done:
			e.Stop()
			return nil, fmt.Errorf("dockerd exited: %s", e.LogTail())
		case <-ctx.Done():
			e.Stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.Stop()
			return nil, fmt.Errorf("dockerd did not answer within 60s: %s", e.LogTail())
		}
	}
}

// Env returns the environment for docker and docker-compose clients of this engine.
func (e *Engine) Env() []string {
	return append(os.Environ(), "DOCKER_HOST="+e.Host, "DOCKER_BUILDKIT=0", "COMPOSE_DOCKER_CLI_BUILD=0")
}

// Docker runs the docker client against the engine and returns its standard output; an error
// carries the standard error.
func (e *Engine) Docker(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, e.docker, args...)
	cmd.Env = e.Env()
	return output(cmd)
}

// output runs cmd and returns its trimmed standard output, or an error with its standard error.
func output(cmd *exec.Cmd) (string, error) {
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// LogTail returns the end of the daemon's log.
func (e *Engine) LogTail() string {
	data, _ := os.ReadFile(filepath.Join(e.dir, "dockerd.log"))
	if len(data) > 3000 {
		data = data[len(data)-3000:]
	}
	return string(data)
}

// Stop stops the daemon (it stops its containers first), then removes its directories.
func (e *Engine) Stop() {
	select {
	case <-e.done:
	default:
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
			<-e.done
		}
	}
	killCgroup(filepath.Base(e.dir)) // nothing, unless the daemon left a container running
	removeDir(e.dir)
}

// removeDir unmounts whatever the daemon left mounted below dir, then removes it.
func removeDir(dir string) {
	if err := testenv.RemoveTree(dir); err != nil {
		fmt.Fprintf(os.Stderr, "dockerenv: %v\n", err)
	}
}

// removeStale stops the daemons and removes the directories of test binaries that no longer run.
func removeStale() {
	paths, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, path := range paths {
		rest := strings.TrimPrefix(filepath.Base(path), dirPrefix)
		owner, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, '-'), 0)])
		if err != nil || syscall.Kill(owner, 0) == nil {
			continue
		}
		if data, err := os.ReadFile(filepath.Join(path, "dockerd.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		for _, p := range procsMentioning(path) { // containerd and its shims
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		killCgroup(filepath.Base(path))
		time.Sleep(time.Second)
		removeDir(path)
	}
}

// procsMentioning lists the processes whose command line contains s.
func procsMentioning(s string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(cmdline), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killCgroup kills every process in the containers' cgroup parent (the engine's directory name),
// in each cgroup hierarchy, and removes the cgroups.
func killCgroup(parent string) {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + parent)
	if info, err := os.Stat("/sys/fs/cgroup/" + parent); err == nil && info.IsDir() {
		roots = append(roots, "/sys/fs/cgroup/"+parent) // cgroup v2
	}
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
				procs, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
				for _, f := range strings.Fields(string(procs)) {
					if pid, err := strconv.Atoi(f); err == nil {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- { // children first; fails while a process remains
			_ = os.Remove(dirs[i])
		}
	}
}
