package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The environment variables that name the directories of the servers' programs, ahead of any
// search.
const (
	envPGBin     = "WALBOX_PG_BIN"
	envRabbitBin = "WALBOX_RABBITMQ_BIN"
)

// minPGMajor is the oldest PostgreSQL the demo runs.
const minPGMajor = 15

// binaries are the directories the demo runs the servers' programs from.
type binaries struct {
	pg, pgVersion string // initdb and postgres; the server's version
	rabbit        string // rabbitmq-server and rabbitmqctl
}

// findBinaries finds PostgreSQL and RabbitMQ. Its error is one line: what is missing, how to
// name it, and the way out without local servers.
func findBinaries() (binaries, error) {
	var b binaries
	var missing []string
	var err error
	if b.pg, b.pgVersion, err = findPostgres(); err != nil {
		missing = append(missing, err.Error())
	}
	if b.rabbit, err = findRabbit(); err != nil {
		missing = append(missing, err.Error())
	}
	if len(missing) > 0 {
		return b, fmt.Errorf("%s; install them or run the servers with `docker compose up` instead",
			strings.Join(missing, "; "))
	}
	return b, nil
}

// findPostgres returns the directory of PostgreSQL 15 or later: WALBOX_PG_BIN, else the first
// of PATH, `pg_config --bindir`, Debian's /usr/lib/postgresql/<N>/bin and Homebrew's
// postgresql@<N> (the highest N first) that holds one.
func findPostgres() (dir, version string, err error) {
	if d := os.Getenv(envPGBin); d != "" {
		if version, err = checkPostgres(d); err != nil {
			return "", "", fmt.Errorf("%s=%s: %v", envPGBin, d, err)
		}
		return d, version, nil
	}
	for _, d := range pgCandidates() {
		if version, err = checkPostgres(d); err == nil {
			return d, version, nil
		}
	}
	return "", "", fmt.Errorf("PostgreSQL %d or later not found (PATH, pg_config, /usr/lib/postgresql, Homebrew; or set %s)",
		minPGMajor, envPGBin)
}

func pgCandidates() []string {
	var dirs []string
	if p, err := exec.LookPath("postgres"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	dirs = append(dirs, versioned("/usr/lib/postgresql/*/bin")...)
	dirs = append(dirs, versioned("/opt/homebrew/opt/postgresql@*/bin")...)
	return append(dirs, versioned("/usr/local/opt/postgresql@*/bin")...)
}

// versioned returns the directories that match pattern, whose * is a major version, the
// highest version first.
func versioned(pattern string) []string {
	dirs, _ := filepath.Glob(pattern)
	major := func(d string) int {
		n, _ := strconv.Atoi(regexp.MustCompile(`\d+`).FindString(strings.TrimPrefix(d, filepath.Dir(filepath.Dir(d)))))
		return n
	}
	sort.SliceStable(dirs, func(i, j int) bool { return major(dirs[i]) > major(dirs[j]) })
	return dirs
}

var pgVersion = regexp.MustCompile(`\(PostgreSQL\) (\d+)(\.\d+)?`)

// checkPostgres returns the version of the server in dir, or why it is not one the demo runs.
func checkPostgres(dir string) (string, error) {
	if err := executables(dir, "postgres", "initdb"); err != nil {
		return "", err
	}
	out, err := exec.Command(filepath.Join(dir, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("postgres --version: %v", err)
	}
	m := pgVersion.FindStringSubmatch(string(out))
	if m == nil {
		return "", fmt.Errorf("postgres --version: unexpected %q", strings.TrimSpace(string(out)))
	}
	if n, _ := strconv.Atoi(m[1]); n < minPGMajor {
		return "", fmt.Errorf("PostgreSQL %s%s is older than %d", m[1], m[2], minPGMajor)
	}
	return m[1] + m[2], nil
}

// findRabbit returns the directory of RabbitMQ's programs: WALBOX_RABBITMQ_BIN, else the first of
// PATH, Debian's /usr/lib/rabbitmq/bin and Homebrew's sbin folders that holds them.
func findRabbit() (string, error) {
	if d := os.Getenv(envRabbitBin); d != "" {
		if err := checkRabbit(d); err != nil {
			return "", fmt.Errorf("%s=%s: %v", envRabbitBin, d, err)
		}
		return d, nil
	}
	var dirs []string
	if p, err := exec.LookPath("rabbitmq-server"); err == nil {
		dirs = append(dirs, rabbitDir(p))
	}
	dirs = append(dirs, "/usr/lib/rabbitmq/bin", "/opt/homebrew/sbin", "/usr/local/sbin")
	for _, d := range dirs {
		if checkRabbit(d) == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("RabbitMQ not found (PATH, /usr/lib/rabbitmq/bin, Homebrew; or set %s)", envRabbitBin)
}

// debianWrapper is what Debian's /usr/sbin/rabbitmq-server links to: a script that runs the
// server as the rabbitmq user, with the system's node. The real programs are beside it.
const debianWrapper = "rabbitmq-script-wrapper"

// rabbitDir returns the directory of the rabbitmq-server found at path: its own, unless it is
// Debian's wrapper.
func rabbitDir(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil && filepath.Base(real) == debianWrapper {
		return filepath.Dir(real)
	}
	return filepath.Dir(path)
}

func checkRabbit(dir string) error {
	if err := executables(dir, "rabbitmq-server", "rabbitmqctl"); err != nil {
		return err
	}
	if real, err := filepath.EvalSymlinks(filepath.Join(dir, "rabbitmq-server")); err == nil && filepath.Base(real) == debianWrapper {
		return errors.New("rabbitmq-server is Debian's wrapper for the system's node")
	}
	return nil
}

// executables returns an error unless dir holds every named program.
func executables(dir string, names ...string) error {
	for _, name := range names {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("no %s in %s", name, dir)
		}
	}
	return nil
}
