package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// pgBinDir holds the PostgreSQL 15 server binaries; the environment
// variable WALBOX_TEST_PG_BIN overrides it.
const pgBinDir = "/usr/lib/postgresql/15/bin"

const (
	pgStartTimeout = 30 * time.Second
	pgStopTimeout  = 30 * time.Second
	startAttempts  = 3
)

// Postgres is a throwaway PostgreSQL server started by the harness, or an
// external one named by WALBOX_TEST_DATABASE_URL.
type Postgres struct {
	url      string
	external bool
	shared   bool

	dir      string // owns everything below; removed at cleanup
	port     int
	settings []setting
	tls      *Certs
	cred     *syscall.Credential // nil: run as the current user
	root     string              // the chroot it runs in; "" for the machine's own PostgreSQL
	binDir   string              // its programs, as the server sees them

	mu   sync.Mutex
	proc *Process // nil while stopped
}

type setting struct{ name, value string }

// PGOption configures StartPostgres.
type PGOption func(*pgConfig)

type pgConfig struct {
	settings []setting
	tls      *Certs
	version  int
	binDir   string // the machine's programs; "": PGBin's
}

func pgConfigOf(opts []PGOption) pgConfig {
	var cfg pgConfig
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// bin returns the path of the machine's program name that cfg runs.
func (c pgConfig) bin(name string) string {
	if c.binDir == "" {
		return PGBin(name)
	}
	return filepath.Join(c.binDir, name)
}

// WithBinDir runs the machine's PostgreSQL programs (initdb, postgres) from dir, not from PGBin's
// directory.
func WithBinDir(dir string) PGOption {
	return func(c *pgConfig) { c.binDir = dir }
}

// PGVersion selects the server's major version: 15 (the default) is the machine's own. 13, 17
// and 18 run from chroots of Debian bullseye, trixie and forky, built once and cached (EnvChrootCache).
func PGVersion(major int) PGOption {
	return func(c *pgConfig) { c.version = major }
}

// pgReleases are the Debian releases of the versions the machine lacks.
var pgReleases = map[int]release{13: bullseye, 17: trixie, 18: forky}

// pgRoot finds or builds the chroot of cfg's version, and returns it with the directory of its
// programs; "" for the machine's own version.
func pgRoot(tb TB, cfg pgConfig) (root, binDir string) {
	tb.Helper()
	if cfg.version == 0 || cfg.version == 15 {
		requireBinary(tb, cfg.bin("postgres"), EnvDatabaseURL)
		return "", cfg.binDir
	}
	rel, ok := pgReleases[cfg.version]
	if !ok {
		tb.Fatalf("testenv: no PostgreSQL %d (13, 15, 17 or 18)", cfg.version)
	}
	return requireChroot(tb, rel), fmt.Sprintf("/usr/lib/postgresql/%d/bin", cfg.version)
}

// WithTLS turns on TLS with the server certificate of certs (ssl = on); clients still choose
// whether to use it.
func WithTLS(certs *Certs) PGOption {
	return func(c *pgConfig) { c.tls = certs }
}

// WithSetting sets a server parameter in postgresql.conf, overriding the
// harness defaults, e.g. WithSetting("wal_level", "replica").
func WithSetting(name, value string) PGOption {
	return func(c *pgConfig) { c.settings = append(c.settings, setting{name, value}) }
}

func defaultSettings() []setting {
	return []setting{
		{"listen_addresses", "127.0.0.1"},
		{"wal_level", "logical"},
		{"fsync", "off"},
		{"full_page_writes", "off"},
		{"max_replication_slots", "20"},
		{"max_wal_senders", "20"},
		{"max_connections", "50"},
		{"shared_buffers", "32MB"},
		{"logging_collector", "off"},
	}
}

// StartPostgres initialises and starts a new server on a free port of
// 127.0.0.1 and waits until it accepts connections. tb.Cleanup stops it
// (immediate shutdown) and removes its directory. With
// WALBOX_TEST_DATABASE_URL set it starts nothing and returns that server.
func StartPostgres(tb TB, opts ...PGOption) *Postgres {
	tb.Helper()
	cfg := pgConfigOf(opts)
	if u := os.Getenv(EnvDatabaseURL); u != "" {
		if cfg.version != 0 || len(cfg.settings) > 0 || cfg.tls != nil {
			// A server of a given version or configuration is one the harness starts: the
			// external one is shared, and a test must not reconfigure it for the others.
			tb.Skipf("testenv: test needs a server the harness starts itself, but %s selects an external one", EnvDatabaseURL)
		}
		return &Postgres{url: u, external: true}
	}
	root, binDir := pgRoot(tb, cfg)
	p, err := startPostgres(cfg, root, binDir)
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(p.shutdown)
	return p
}

// NewPostgres starts a server as StartPostgres does, for a program rather than a test (the demo,
// the benchmark): it returns an error instead of failing a test, and Close stops the server and
// removes its directory. It runs the machine's own PostgreSQL (PGBin, or WithBinDir) and ignores
// WALBOX_TEST_DATABASE_URL.
func NewPostgres(opts ...PGOption) (*Postgres, error) {
	cfg := pgConfigOf(opts)
	if cfg.version != 0 && cfg.version != 15 {
		return nil, fmt.Errorf("testenv: PostgreSQL %d runs from a test's chroot; NewPostgres runs the machine's", cfg.version)
	}
	if _, err := exec.LookPath(cfg.bin("postgres")); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	return startPostgres(cfg, "", cfg.binDir)
}

// Close stops a server NewPostgres started (immediate shutdown) and removes its directory.
func (p *Postgres) Close() { p.shutdown() }

// SharedPostgres returns the test binary's shared server, starting it on
// first use. Tests must not stop it; use StartPostgres for that. It needs
// TestMain to call Main.
func SharedPostgres(tb TB) *Postgres {
	tb.Helper()
	if u := os.Getenv(EnvDatabaseURL); u != "" {
		return &Postgres{url: u, external: true}
	}
	requireMain(tb, "SharedPostgres")
	requireBinary(tb, PGBin("postgres"), EnvDatabaseURL)
	sharedPGMu.Lock()
	defer sharedPGMu.Unlock()
	if sharedPG == nil && sharedPGErr == nil {
		sharedPG, sharedPGErr = startPostgres(pgConfig{}, "", "")
		if sharedPG != nil {
			sharedPG.shared = true
		}
	}
	if sharedPGErr != nil {
		tb.Fatalf("testenv: shared postgres: %v", sharedPGErr)
	}
	return sharedPG
}

// PGBin returns the path of the PostgreSQL 15 program name (postgres, initdb, pgbench, ...) in
// the directory the harness runs them from.
func PGBin(name string) string {
	dir := pgBinDir
	if d := os.Getenv("WALBOX_TEST_PG_BIN"); d != "" {
		dir = d
	}
	return filepath.Join(dir, name)
}

func startPostgres(cfg pgConfig, root, binDir string) (*Postgres, error) {
	p := &Postgres{settings: append(defaultSettings(), cfg.settings...), tls: cfg.tls, root: root, binDir: binDir}
	if err := p.initDir(); err != nil {
		p.shutdown()
		return nil, err
	}
	var err error
	for range startAttempts {
		if p.port, err = freePort(); err != nil {
			break
		}
		if err = p.writeConf(); err != nil {
			break
		}
		if err = p.start(); !errors.Is(err, errInUse) {
			break
		}
	}
	if err != nil {
		p.shutdown()
		return nil, err
	}
	return p, nil
}

// initDir creates the instance directory and runs initdb. As root the
// server runs as the postgres user, which must own the directory. In a
// chroot the directory is in the chroot's /tmp.
func (p *Postgres) initDir() error {
	dir, err := makeDirIn(p.tmpDir(), "pg")
	if err != nil {
		return err
	}
	p.dir = dir
	if os.Geteuid() == 0 {
		if p.root != "" {
			p.cred, err = chrootCred(p.root, "postgres")
		} else {
			p.cred, err = lookupCred("postgres")
		}
		if err != nil {
			return err
		}
		if err := os.Chown(dir, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			return fmt.Errorf("chown %s: %w", dir, err)
		}
	}
	cmd := exec.Command(p.bin("initdb"), "-D", inRoot(p.root, p.dataDir()), "-A", "trust", "-U", "postgres",
		"-E", "UTF8", "--locale=C", "--no-sync")
	p.prepare(cmd)
	if out, err := run("initdb", cmd, scaled(pgStartTimeout)); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	return nil
}

func lookupCred(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("running as root needs the %s user: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (p *Postgres) prepare(cmd *exec.Cmd) {
	cmd.Dir = inRoot(p.root, p.dir)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "HOME=" + cmd.Dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Chroot: p.root}
}

// bin returns the path of a server program as the server's root sees it.
func (p *Postgres) bin(name string) string {
	if p.binDir == "" {
		return PGBin(name)
	}
	return filepath.Join(p.binDir, name)
}

// tmpDir is where the instance directory goes: the chroot's /tmp, or the machine's.
func (p *Postgres) tmpDir() string {
	if p.root == "" {
		return ""
	}
	return chrootTmp(p.root)
}

func (p *Postgres) dataDir() string { return filepath.Join(p.dir, "data") }
func (p *Postgres) logFile() string { return filepath.Join(p.dir, "postgres.log") }

// writeConf writes the harness settings into walbox.conf, included last
// from postgresql.conf so that they win.
func (p *Postgres) writeConf() error {
	var b strings.Builder
	settings := p.settings
	if p.tls != nil {
		cert, key := filepath.Join(p.dataDir(), "server.crt"), filepath.Join(p.dataDir(), "server.key")
		if err := p.writeFile(cert, string(p.tls.Cert)); err != nil {
			return err
		}
		if err := p.writeFile(key, string(p.tls.Key)); err != nil {
			return err
		}
		settings = append(settings, setting{"ssl", "on"}, setting{"ssl_cert_file", inRoot(p.root, cert)}, setting{"ssl_key_file", inRoot(p.root, key)})
	}
	for _, s := range append(settings,
		setting{"port", strconv.Itoa(p.port)},
		setting{"unix_socket_directories", inRoot(p.root, p.dir)}) {
		fmt.Fprintf(&b, "%s = '%s'\n", s.name, strings.ReplaceAll(s.value, "'", "''"))
	}
	if err := p.writeFile(filepath.Join(p.dataDir(), "walbox.conf"), b.String()); err != nil {
		return err
	}
	main := filepath.Join(p.dataDir(), "postgresql.conf")
	conf, err := os.ReadFile(main)
	if err != nil {
		return fmt.Errorf("read postgresql.conf: %w", err)
	}
	if strings.Contains(string(conf), "include 'walbox.conf'") {
		return nil
	}
	return p.writeFile(main, string(conf)+"\ninclude 'walbox.conf'\n")
}

// writeFile writes a file the server user can read.
func (p *Postgres) writeFile(path, data string) error {
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if p.cred != nil {
		if err := os.Chown(path, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			return fmt.Errorf("chown %s: %w", filepath.Base(path), err)
		}
	}
	return nil
}

// start runs the postmaster and waits until it accepts connections.
func (p *Postgres) start() error {
	p.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
	logf, err := os.OpenFile(p.logFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open postgres log: %w", err)
	}
	defer logf.Close() // the child keeps its own descriptor
	cmd := exec.Command(p.bin("postgres"), "-D", inRoot(p.root, p.dataDir()))
	p.prepare(cmd)
	cmd.Stdout, cmd.Stderr = logf, logf
	proc, err := Spawn("postgres", cmd)
	if err != nil {
		return err
	}
	if err := p.waitReady(proc); err != nil {
		proc.Kill()
		return err
	}
	p.mu.Lock()
	p.proc = proc
	p.mu.Unlock()
	return nil
}

func (p *Postgres) waitReady(proc *Process) error {
	deadline := time.Now().Add(scaled(pgStartTimeout))
	for time.Now().Before(deadline) {
		if proc.Exited() {
			tail := logTail(p.logFile())
			if strings.Contains(tail, "Address already in use") {
				return fmt.Errorf("postgres on port %d: %w", p.port, errInUse)
			}
			return fmt.Errorf("postgres exited during start: %v%s", proc.cmd.ProcessState, tail)
		}
		if pingPostgres(p.url) == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("postgres not accepting connections after %v%s", scaled(pgStartTimeout), logTail(p.logFile()))
}

func pingPostgres(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := connect(ctx, dsn)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// URL returns the superuser DSN of the postgres database.
func (p *Postgres) URL() string { return p.url }

// External reports whether the server comes from WALBOX_TEST_DATABASE_URL.
func (p *Postgres) External() bool { return p.external }

// Port returns the TCP port; 0 for an external server.
func (p *Postgres) Port() int { return p.port }

// Dir returns the instance directory (data directory, socket, log); "" when external.
func (p *Postgres) Dir() string { return p.dir }

// LogFile returns the server log path; "" when external.
func (p *Postgres) LogFile() string {
	if p.external {
		return ""
	}
	return p.logFile()
}

// PID returns the postmaster's pid, or 0 when stopped or external.
func (p *Postgres) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil || p.proc.Exited() {
		return 0
	}
	return p.proc.PID()
}

func (p *Postgres) running() bool { return p.PID() != 0 }

var stopSignals = map[string]syscall.Signal{
	"smart":     syscall.SIGTERM,
	"fast":      syscall.SIGINT,
	"immediate": syscall.SIGQUIT,
}

// Stop shuts the server down like pg_ctl stop -m mode (smart, fast or
// immediate) and waits for the postmaster to exit.
func (p *Postgres) Stop(tb TB, mode string) {
	tb.Helper()
	p.mustOwn(tb, "Stop")
	sig, ok := stopSignals[mode]
	if !ok {
		tb.Fatalf("testenv: unknown postgres stop mode %q (smart, fast, immediate)", mode)
	}
	p.mu.Lock()
	proc := p.proc
	p.proc = nil
	p.mu.Unlock()
	if proc == nil {
		tb.Fatal("testenv: postgres is not running")
	}
	proc.Signal(sig)
	if !proc.Wait(scaled(pgStopTimeout)) {
		proc.Kill()
		tb.Fatalf("testenv: postgres did not stop (%s) within %v; killed it%s", mode, scaled(pgStopTimeout), logTail(p.logFile()))
	}
}

// Start starts a stopped server again on the same port and data directory,
// running crash recovery if it was stopped in immediate mode.
func (p *Postgres) Start(tb TB) {
	tb.Helper()
	p.mustOwn(tb, "Start")
	if p.running() {
		tb.Fatal("testenv: postgres is already running")
	}
	var err error
	for range startAttempts {
		// Retry only a bind failure: a port freed by the old server may linger briefly.
		if err = p.start(); !errors.Is(err, errInUse) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		tb.Fatalf("testenv: restart postgres: %v", err)
	}
}

func (p *Postgres) mustOwn(tb TB, op string) {
	tb.Helper()
	switch {
	case p.external:
		tb.Fatalf("testenv: %s on an external postgres (%s); call RequireOwn first", op, EnvDatabaseURL)
	case p.shared:
		tb.Fatalf("testenv: %s on the shared postgres; use StartPostgres for a server of your own", op)
	}
}

// shutdown stops the server immediately and removes its directory.
func (p *Postgres) shutdown() {
	p.mu.Lock()
	proc := p.proc
	p.proc = nil
	p.mu.Unlock()
	if proc != nil {
		proc.Signal(syscall.SIGQUIT)
		if !proc.Wait(5 * time.Second) {
			proc.Kill()
		}
	}
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
	}
}

// databaseURL returns the URL of database name on the same server.
func (p *Postgres) databaseURL(name string) string {
	u, err := url.Parse(p.url)
	if err != nil {
		return p.url // unreachable for URLs built here; external ones were parsed by the caller
	}
	u.Path = "/" + name
	return u.String()
}
