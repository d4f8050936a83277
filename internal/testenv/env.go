package testenv

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// TB is the part of testing.TB the harness uses: a test or benchmark (*testing.T, *testing.B)
// is one. The package does not import testing, so that programs (the demo, the benchmark) can
// start servers and processes with it without linking the testing package.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Failed() bool
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Skipf(format string, args ...any)
	TempDir() string
}

// Environment variables that switch the harness to external servers.
const (
	EnvDatabaseURL = "WALBOX_TEST_DATABASE_URL"
	EnvAMQPURL     = "WALBOX_TEST_AMQP_URL"
)

// dirPrefix names every directory the harness creates under os.TempDir, followed by the pid
// of the owning test binary, so Main can remove what a crashed run left behind.
const dirPrefix = "walbox-testenv-"

var seq atomic.Int64

// errInUse marks a start that failed because a port or the node name was
// still taken; the caller may retry.
var errInUse = errors.New("address or name in use")

// UniqueName returns prefix followed by a suffix unique within this process,
// lowercased and restricted to [a-z0-9_], for slots, publications, exchanges and queues.
func UniqueName(prefix string) string {
	name := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), seq.Add(1))
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		default:
			return '_'
		}
	}, name)
}

// RequireOwn skips the test when s is an external server: the test needs a
// server that the harness started itself (to stop, kill or restart it).
func RequireOwn(tb TB, s interface{ External() bool }) {
	tb.Helper()
	if !s.External() {
		return
	}
	env := EnvDatabaseURL
	if _, ok := s.(*Rabbit); ok {
		env = EnvAMQPURL
	}
	tb.Skipf("testenv: test needs a server the harness started itself, but %s selects an external one", env)
}

// EnvTimeoutScale multiplies the harness's start and stop timeouts, for slow
// or overloaded machines (e.g. 2 or 3).
const EnvTimeoutScale = "WALBOX_TEST_TIMEOUT_SCALE"

func scaled(d time.Duration) time.Duration {
	f, err := strconv.ParseFloat(os.Getenv(EnvTimeoutScale), 64)
	if err != nil || f <= 0 {
		return d
	}
	return time.Duration(float64(d) * f)
}

// Short reports whether integration tests should skip: with -short, except under CI=true, where
// every integration test runs whatever the flags say. It reads the test binary's -test.short
// flag; outside a test binary it reports false.
func Short() bool {
	f := flag.Lookup("test.short")
	return f != nil && f.Value.String() == "true" && !inCI()
}

// inCI reports whether the tests run under CI, where missing servers are failures.
func inCI() bool {
	v, _ := strconv.ParseBool(os.Getenv("CI"))
	return v
}

// requireBinary finds a server binary; outside CI a missing one skips the
// test. urlEnv names the variable that selects an external server instead.
func requireBinary(tb TB, path, urlEnv string) {
	tb.Helper()
	if _, err := exec.LookPath(path); err != nil {
		if inCI() {
			tb.Fatalf("testenv: %s not found (CI=true): %v", path, err)
		}
		tb.Skipf("testenv: %s not found; install it (.ci/install-deps.sh) or set %s", path, urlEnv)
	}
}

// FreeAddr returns a host:port on 127.0.0.1 that was free a moment ago, for a server under test.
func FreeAddr(tb TB) string {
	tb.Helper()
	port, err := freePort()
	if err != nil {
		tb.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

// HTTPGet gets http://addr+path and returns the status code and the body.
func HTTPGet(addr, path string) (int, string, error) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// makeDir creates a fresh directory for one server instance.
func makeDir(kind string) (string, error) { return makeDirIn("", kind) }

// makeDirIn creates it in parent ("": os.TempDir).
func makeDirIn(parent, kind string) (string, error) {
	dir, err := os.MkdirTemp(parent, fmt.Sprintf("%s%d-%s-", dirPrefix, os.Getpid(), kind))
	if err != nil {
		return "", fmt.Errorf("create %s dir: %w", kind, err)
	}
	return dir, nil
}

// removeDirs removes the harness directories of this test binary and of
// test binaries that no longer run, in os.TempDir and in the chroots' /tmp.
func removeDirs() {
	paths, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	if cache, err := chrootCache(); err == nil {
		inChroots, _ := filepath.Glob(filepath.Join(cache, "*", "tmp", dirPrefix+"*"))
		paths = append(paths, inChroots...)
	}
	for _, path := range paths {
		rest := strings.TrimPrefix(filepath.Base(path), dirPrefix)
		pid, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, '-'), 0)])
		if err != nil || (pid != os.Getpid() && pidAlive(pid)) {
			continue
		}
		_ = os.RemoveAll(path)
	}
}

// Shared servers, one of each per test binary, stopped by Main.
var (
	mainRunning atomic.Bool
	sharedPGMu  sync.Mutex // held while the shared server starts
	sharedPG    *Postgres
	sharedPGErr error
	sharedMQ    shared[Rabbit]  // the AMQP node
	sharedST    shared[Rabbit]  // the stream node
	sharedCL    shared[Cluster] // the cluster
)

// Main runs the tests and then stops the shared servers. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
//
// On SIGINT, SIGTERM or SIGHUP it kills every server the harness started and
// exits. If the binary dies any other way (panic, timeout, SIGKILL), the
// kernel kills the servers (parent-death signal) and the next run removes
// their directories.
func Main(m interface{ Run() int }) int {
	removeDirs()
	mainRunning.Store(true)
	stop := handleSignals()
	code := m.Run()
	stop()
	stopShared()
	killAll()
	removeDirs()
	return code
}

func handleSignals() (stop func()) {
	sigs := make(chan os.Signal, 1)
	done := make(chan struct{})
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		select {
		case sig := <-sigs:
			// No locks here: a test may hold a shared lock while a server starts.
			fmt.Fprintf(os.Stderr, "testenv: %v: killing test servers\n", sig)
			killAll()
			removeDirs()
			os.Exit(2)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}

func stopShared() {
	sharedPGMu.Lock()
	if sharedPG != nil {
		sharedPG.shutdown()
		sharedPG = nil
	}
	sharedPGMu.Unlock()
	sharedMQ.stop((*Rabbit).shutdown)
	sharedST.stop((*Rabbit).shutdown)
	sharedCL.stop((*Cluster).shutdown)
}

// shared is a server of the test binary, started on first use and stopped by Main.
type shared[T any] struct {
	mu  sync.Mutex // held while the server starts
	v   *T
	err error
}

// get returns the server, started by start on first use, or the error that start returned.
func (s *shared[T]) get(start func() (*T, error)) (*T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.v == nil && s.err == nil {
		s.v, s.err = start()
	}
	return s.v, s.err
}

// stop shuts the server down, if it started.
func (s *shared[T]) stop(shutdown func(*T)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.v != nil {
		shutdown(s.v)
		s.v = nil
	}
}

func requireMain(tb TB, fn string) {
	tb.Helper()
	if !mainRunning.Load() {
		tb.Fatalf("testenv: %s needs TestMain to call testenv.Main so the shared server is stopped", fn)
	}
}
