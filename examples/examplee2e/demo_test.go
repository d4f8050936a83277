package examplee2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

var summaryLine = regexp.MustCompile(`demo: done: placed (\d+), failed (\d+), published (\d+), notified (\d+), duplicates (\d+), lag (-?\d+)`)

// The demo finds the servers' programs on PATH alone, and says which it uses; it starts its own
// servers and services, places orders for a few seconds, and every order is notified exactly
// once before it stops everything.
func TestDemoNotifiesEveryOrder(t *testing.T) {
	if testenv.Short() {
		t.Skip("starts PostgreSQL and RabbitMQ")
	}
	// The demo's servers are its own: on external ones its relay and notifier would share the
	// exchange outbox and the queue notifications with whoever else uses them (under compose,
	// the stack's relay and notifier), and count their messages.
	testenv.RequireOwn(t, testenv.SharedPostgres(t))
	testenv.RequireOwn(t, testenv.SharedRabbit(t))
	bin := onPath(t)
	cmd := exec.Command(testenv.Build(t, "examples/cmd/demo"), "-duration", "8s", "-rate", "50")
	cmd.Env = demoEnv(bin + string(os.PathListSeparator) + basePath(t))
	out, code := testenv.Run(t, cmd, 4*time.Minute)
	t.Logf("demo output:\n%s", out)
	if code != 0 {
		t.Fatalf("demo exited %d", code)
	}
	for _, want := range []string{"programs in " + bin + "\n", "demo: RabbitMQ programs in " + bin + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo does not say it uses the programs on PATH: no %q", want)
		}
	}
	m := summaryLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatal("no summary line in the demo output")
	}
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	placed, failed, published, notified, dups := n(1), n(2), n(3), n(4), n(5)
	if placed < 100 || failed != 0 {
		t.Errorf("placed %d, failed %d: want at least 100 placed in 8s at 50/s, none failed", placed, failed)
	}
	if notified != placed || published != placed || dups != 0 {
		t.Errorf("placed %d, published %d, notified %d, duplicates %d: want all published and notified once",
			placed, published, notified, dups)
	}
}

// With WALBOX_PG_BIN naming a folder without PostgreSQL, the demo stops before it builds or
// starts anything, with one line that names the setting and points to docker compose.
func TestDemoSaysInOneLineWhatIsMissing(t *testing.T) {
	empty := t.TempDir()
	cmd := exec.Command(testenv.Build(t, "examples/cmd/demo"), "-duration", "1s")
	cmd.Env = append(demoEnv(basePath(t)), "WALBOX_PG_BIN="+empty)
	out, code := testenv.Run(t, cmd, time.Minute)
	if code != 1 {
		t.Errorf("demo exited %d, want 1", code)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("demo printed %d lines, want 1:\n%s", len(lines), out)
	}
	for _, want := range []string{"WALBOX_PG_BIN=" + empty, "no postgres in " + empty, "docker compose up"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("the line does not say %q: %s", want, lines[0])
		}
	}
}

// onPath returns a folder of links to the programs of the harness's PostgreSQL and RabbitMQ, to
// put on PATH. Others may read it: as root, the server runs as the postgres user.
func onPath(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, src := range []string{filepath.Dir(testenv.PGBin("postgres")), filepath.Dir(testenv.RabbitBin("rabbitmq-server"))} {
		entries, err := os.ReadDir(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() == "rabbitmq-script-wrapper" {
				continue
			}
			if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// basePath is a PATH with the go command and the system's programs, but without the servers'
// programs or pg_config: a folder of links to /usr/bin and /bin less those.
func basePath(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	sys := t.TempDir()
	for _, src := range []string{"/usr/bin", "/bin"} {
		entries, _ := os.ReadDir(src)
		for _, e := range entries {
			name := e.Name()
			if name == "pg_config" || name == "postgres" || name == "initdb" || strings.HasPrefix(name, "rabbitmq") {
				continue
			}
			_ = os.Symlink(filepath.Join(src, name), filepath.Join(sys, name)) // the first of a name wins
		}
	}
	return filepath.Dir(goBin) + string(os.PathListSeparator) + sys
}

// demoEnv is this process's environment with path as PATH and without the settings that name
// the servers' programs.
func demoEnv(path string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PATH", "WALBOX_PG_BIN", "WALBOX_RABBITMQ_BIN":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PATH="+path)
}
