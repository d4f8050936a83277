package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rabbitBinDir holds rabbitmq-server and rabbitmqctl; the environment
// variable WALBOX_TEST_RABBITMQ_BIN overrides it.
const rabbitBinDir = "/usr/lib/rabbitmq/bin"

// rabbitStartTimeout bounds a node's start. make test runs the modules side by side on 2 cores. A
// node then took over a minute to boot, twice in a day.
const (
	rabbitStartTimeout = 3 * time.Minute
	rabbitStopTimeout  = 30 * time.Second
	rabbitCtlTimeout   = 60 * time.Second
)

// Rabbit is a RabbitMQ node of its own started by the harness, or an
// external broker named by WALBOX_TEST_AMQP_URL.
type Rabbit struct {
	url      string
	external bool
	shared   bool

	dir        string // node home: config, cookie, mnesia, logs; removed at cleanup
	node       string // walbox-test-<pid>-<n>@localhost
	port       int
	distPort   int
	tls        *Certs // with a TLS listener on tlsPort when set
	tlsPort    int
	stream     bool // with the stream plugin, its listener on streamPort
	streamPort int
	hash       bool // with the consistent-hash exchange plugin

	cookie string // the Erlang cookie; the nodes of a cluster share one
	root   string // the chroot it runs in; "" for the machine's own RabbitMQ
	binDir string // the machine's programs; "": RabbitBin's
	conf   string // lines added to rabbitmq.conf (StartRabbitConf)

	mu   sync.Mutex
	proc *Process // nil while stopped
}

const rabbitConf = `loopback_users.guest = true
disk_free_limit.absolute = 10MB
vm_memory_high_watermark.relative = 0.6
log.console = false
log.file.level = info
`

// RabbitOption configures StartRabbit.
type RabbitOption func(*rabbitConfig)

type rabbitConfig struct {
	version string
	binDir  string // the machine's programs; "": rabbitBin's
	stream  bool   // with the stream plugin (StreamPlugin)
	hash    bool   // with the consistent-hash exchange plugin (HashPlugin)
}

func rabbitConfigOf(opts []RabbitOption) rabbitConfig {
	var cfg rabbitConfig
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// bin returns the path of the machine's program name that cfg runs.
func (c rabbitConfig) bin(name string) string {
	if c.binDir == "" {
		return RabbitBin(name)
	}
	return filepath.Join(c.binDir, name)
}

// RabbitBinDir runs the machine's RabbitMQ programs (rabbitmq-server, rabbitmqctl) from dir.
func RabbitBinDir(dir string) RabbitOption {
	return func(c *rabbitConfig) { c.binDir = dir }
}

// StreamPlugin enables the stream plugin, its listener on a free port of 127.0.0.1 that
// StreamURL addresses. NewRabbit takes it; tests use StartRabbitStream.
func StreamPlugin() RabbitOption {
	return func(c *rabbitConfig) { c.stream = true }
}

// HashPlugin enables the consistent-hash exchange plugin, which partitioned consumers need. The
// shared node has it. An external broker is taken as it is: compose's enables it.
func HashPlugin() RabbitOption {
	return func(c *rabbitConfig) { c.hash = true }
}

// RabbitVersion selects the node's version: "3.10" (the default) is the machine's own; "4.0"
// runs from a chroot of Debian trixie, built once and cached (EnvChrootCache).
func RabbitVersion(v string) RabbitOption {
	return func(c *rabbitConfig) { c.version = v }
}

// rabbitRoot finds or builds the chroot of cfg's version; "" for the machine's own version.
func rabbitRoot(tb TB, cfg rabbitConfig) string {
	tb.Helper()
	switch cfg.version {
	case "", "3.10":
		requireBinary(tb, cfg.bin("rabbitmq-server"), EnvAMQPURL)
		return ""
	case "4.0":
		return requireChroot(tb, trixie)
	}
	tb.Fatalf("testenv: no RabbitMQ %s (3.10 or 4.0)", cfg.version)
	return ""
}

// StartRabbit starts a RabbitMQ node with its own name, ports and
// directories, and waits until it accepts AMQP connections. tb.Cleanup kills
// it and removes its directory. With WALBOX_TEST_AMQP_URL set it starts
// nothing and returns that broker.
func StartRabbit(tb TB, opts ...RabbitOption) *Rabbit {
	tb.Helper()
	cfg := rabbitConfigOf(opts)
	if u := os.Getenv(EnvAMQPURL); u != "" {
		if cfg.version != "" || cfg.stream {
			tb.Skipf("testenv: test needs a node the harness starts itself, but %s selects an external one", EnvAMQPURL)
		}
		return &Rabbit{url: u, external: true}
	}
	r, err := startNode(&Rabbit{cookie: UniqueName("cookie"), root: rabbitRoot(tb, cfg), binDir: cfg.binDir, stream: cfg.stream, hash: cfg.hash})
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(r.shutdown)
	return r
}

// NewRabbit starts a node as StartRabbit does, for a program rather than a test (the demo, the
// benchmark): it returns an error instead of failing a test, and Close kills the node and
// removes its directory. It runs the machine's own RabbitMQ (rabbitBin's directory, or
// RabbitBinDir) and ignores WALBOX_TEST_AMQP_URL.
func NewRabbit(opts ...RabbitOption) (*Rabbit, error) {
	cfg := rabbitConfigOf(opts)
	if cfg.version != "" && cfg.version != "3.10" {
		return nil, fmt.Errorf("testenv: RabbitMQ %s runs from a test's chroot; NewRabbit runs the machine's", cfg.version)
	}
	if _, err := exec.LookPath(cfg.bin("rabbitmq-server")); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	return startNode(&Rabbit{cookie: UniqueName("cookie"), binDir: cfg.binDir, stream: cfg.stream})
}

// Close kills a node NewRabbit started and removes its directory.
func (r *Rabbit) Close() { r.shutdown() }

// StartRabbitConf starts a node like StartRabbit with conf, lines of rabbitmq.conf such as
// "max_message_size = 1048576", added to its configuration. It needs a node of its own, so in
// external mode it skips.
func StartRabbitConf(tb TB, conf string) *Rabbit {
	tb.Helper()
	if os.Getenv(EnvAMQPURL) != "" {
		tb.Skipf("test needs a node the harness configures itself; %s is set", EnvAMQPURL)
	}
	requireBinary(tb, RabbitBin("rabbitmq-server"), EnvAMQPURL)
	r, err := startRabbitWith(nil, UniqueName("cookie"), "", "", conf)
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(r.shutdown)
	return r
}

// StartRabbitTLS starts a node like StartRabbit with, besides its plain listener, a TLS listener
// on 127.0.0.1 serving the certificate of certs; TLSURL addresses it. It needs its own node, so
// in external mode it skips.
func StartRabbitTLS(tb TB, certs *Certs) *Rabbit {
	tb.Helper()
	if os.Getenv(EnvAMQPURL) != "" {
		tb.Skipf("test needs a TLS node the harness starts itself; %s is set", EnvAMQPURL)
	}
	requireBinary(tb, RabbitBin("rabbitmq-server"), EnvAMQPURL)
	r, err := startRabbit(certs)
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(r.shutdown)
	return r
}

// StartRabbitStream starts a node like StartRabbit with the stream plugin enabled and its stream
// listener on a free port of 127.0.0.1, which StreamURL addresses. It needs its own node, so in
// external mode it skips.
func StartRabbitStream(tb TB) *Rabbit {
	tb.Helper()
	if os.Getenv(EnvAMQPURL) != "" {
		tb.Skipf("test needs a stream node the harness starts itself; %s is set", EnvAMQPURL)
	}
	requireBinary(tb, RabbitBin("rabbitmq-server"), EnvAMQPURL)
	r, err := startNode(&Rabbit{stream: true, cookie: UniqueName("cookie")})
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(r.shutdown)
	return r
}

// StreamURL is the rabbitmq-stream URL of the stream listener, for the guest user; "" for a node
// without one.
func (r *Rabbit) StreamURL() string {
	if r.streamPort == 0 {
		return ""
	}
	return fmt.Sprintf("rabbitmq-stream://guest:guest@127.0.0.1:%d/", r.streamPort)
}

// TLSURL is the amqps URL of the TLS listener (host localhost, which the certificate names).
func (r *Rabbit) TLSURL() string {
	return fmt.Sprintf("amqps://guest:guest@localhost:%d/", r.tlsPort)
}

// SharedRabbit returns the test binary's shared node, starting it on first
// use (a node takes seconds to boot). Tests must not stop it and should use
// UniqueName for their exchanges and queues. It needs TestMain to call Main.
func SharedRabbit(tb TB) *Rabbit {
	tb.Helper()
	if u := os.Getenv(EnvAMQPURL); u != "" {
		return &Rabbit{url: u, external: true}
	}
	requireMain(tb, "SharedRabbit")
	requireBinary(tb, RabbitBin("rabbitmq-server"), EnvAMQPURL)
	return sharedNode(tb, &sharedMQ, "shared rabbitmq", &Rabbit{cookie: UniqueName("cookie"), hash: true})
}

// SharedRabbitStream returns the test binary's shared node with the stream plugin, starting it
// on first use. Tests must not stop it and should use UniqueName for their streams, exchanges
// and queues. A test that kills, stops or reconfigures its node uses StartRabbitStream. In
// external mode it skips, as StartRabbitStream does.
func SharedRabbitStream(tb TB) *Rabbit {
	tb.Helper()
	requireSharedNodes(tb, "SharedRabbitStream", "a stream node")
	return sharedNode(tb, &sharedST, "shared rabbitmq stream node", &Rabbit{stream: true, cookie: UniqueName("cookie")})
}

// requireSharedNodes skips the test in external mode and fails it without Main or the RabbitMQ
// programs. fn is the caller, what the nodes it needs.
func requireSharedNodes(tb TB, fn, what string) {
	tb.Helper()
	if os.Getenv(EnvAMQPURL) != "" {
		tb.Skipf("test needs %s the harness starts itself; %s is set", what, EnvAMQPURL)
	}
	requireMain(tb, fn)
	requireBinary(tb, RabbitBin("rabbitmq-server"), EnvAMQPURL)
}

// sharedNode returns the shared node s, starting node as it on first use.
func sharedNode(tb TB, s *shared[Rabbit], what string, node *Rabbit) *Rabbit {
	tb.Helper()
	r, err := s.get(func() (*Rabbit, error) {
		r, err := startNode(node)
		if r != nil {
			r.shared = true
		}
		return r, err
	})
	if err != nil {
		tb.Fatalf("testenv: %s: %v", what, err)
	}
	return r
}

// RabbitBin returns the path of the machine's RabbitMQ program name (rabbitmq-server, rabbitmqctl) in
// the directory the harness runs them from.
func RabbitBin(name string) string {
	dir := rabbitBinDir
	if d := os.Getenv("WALBOX_TEST_RABBITMQ_BIN"); d != "" {
		dir = d
	}
	return filepath.Join(dir, name)
}

func startRabbit(certs *Certs) (*Rabbit, error) {
	return startRabbitNode(certs, UniqueName("cookie"), "", "")
}

// startRabbitNode starts a node with the given Erlang cookie, in root unless it is "", from
// binDir's programs unless it is "".
func startRabbitNode(certs *Certs, cookie, root, binDir string) (*Rabbit, error) {
	return startRabbitWith(certs, cookie, root, binDir, "")
}

// startRabbitWith starts a node like startRabbitNode, with extra rabbitmq.conf lines.
func startRabbitWith(certs *Certs, cookie, root, binDir, conf string) (*Rabbit, error) {
	return startNode(&Rabbit{tls: certs, cookie: cookie, root: root, binDir: binDir, conf: conf})
}

// startNode starts the node r describes (TLS, stream plugin, cookie, chroot, programs, extra
// configuration).
func startNode(r *Rabbit) (*Rabbit, error) {
	r.node = fmt.Sprintf("walbox-test-%d-%d@localhost", os.Getpid(), seq.Add(1))
	if err := r.initDir(); err != nil {
		r.shutdown()
		return nil, err
	}
	var err error
	for range startAttempts {
		if r.port, err = freePort(); err != nil {
			break
		}
		if r.distPort, err = freePort(); err != nil {
			break
		}
		if r.tls != nil {
			if r.tlsPort, err = freePort(); err != nil {
				break
			}
		}
		if r.stream {
			if r.streamPort, err = freePort(); err != nil {
				break
			}
		}
		if err = r.start(); !errors.Is(err, errInUse) {
			break
		}
	}
	if err != nil {
		r.shutdown()
		return nil, err
	}
	return r, nil
}

// initDir creates the node directory: config, an empty plugins file, an
// empty rabbitmq-env.conf (so the system one is not read) and the cookie.
func (r *Rabbit) initDir() error {
	parent := ""
	if r.root != "" {
		parent = chrootTmp(r.root)
	}
	dir, err := makeDirIn(parent, "rabbit")
	if err != nil {
		return err
	}
	r.dir = dir
	var names []string
	if r.stream {
		names = append(names, "rabbitmq_stream")
	}
	if r.hash {
		names = append(names, "rabbitmq_consistent_hash_exchange")
	}
	plugins := ""
	if len(names) > 0 {
		plugins = "[" + strings.Join(names, ", ") + "].\n"
	}
	files := []struct {
		name, data string
		mode       os.FileMode
	}{
		{"rabbitmq.conf", rabbitConf, 0o644},
		{"enabled_plugins", plugins, 0o644},
		{"rabbitmq-env.conf", "", 0o644},
		{".erlang.cookie", r.cookie, 0o400},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.data), f.mode); err != nil {
			return fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "log"), 0o755); err != nil {
		return fmt.Errorf("create rabbitmq log dir: %w", err)
	}
	return nil
}

// env is the node's environment, its paths as the node sees them.
func (r *Rabbit) env() []string {
	dir := inRoot(r.root, r.dir)
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + dir,
		"LC_ALL=C.UTF-8",
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_NODENAME=" + r.node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(r.port),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(r.distPort),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(dir, "log"),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE=" + filepath.Join(dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_PID_FILE=" + inRoot(r.root, r.pidFile()),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		"ERL_EPMD_ADDRESS=127.0.0.1", // if the node has to start epmd, keep it on loopback
		// Makes rabbitmq-server exec the VM instead of running it in the
		// background of a shell: the VM is then our child, in our process
		// group, and inherits the parent-death signal.
		"RUNNING_UNDER_SYSTEMD=true",
	}
}

func (r *Rabbit) pidFile() string    { return filepath.Join(r.dir, "rabbit.pid") }
func (r *Rabbit) startupLog() string { return filepath.Join(r.dir, "log", "startup.log") }
func (r *Rabbit) nodeLog() string    { return filepath.Join(r.dir, "log", r.node+".log") }

func (r *Rabbit) logTail() string { return logTail(r.startupLog(), r.nodeLog()) }

// writeConf writes rabbitmq.conf, with the TLS listener when there is one.
func (r *Rabbit) writeConf() error {
	conf := rabbitConf + r.conf
	if conf != "" && !strings.HasSuffix(conf, "\n") {
		conf += "\n"
	}
	if r.tls != nil {
		if r.root != "" {
			return errors.New("a TLS node runs only on the machine's own RabbitMQ")
		}
		conf += fmt.Sprintf("listeners.ssl.default = 127.0.0.1:%d\n", r.tlsPort) +
			"ssl_options.cacertfile = " + r.tls.CAFile + "\n" +
			"ssl_options.certfile = " + r.tls.CertFile + "\n" +
			"ssl_options.keyfile = " + r.tls.KeyFile + "\n" +
			"ssl_options.verify = verify_none\nssl_options.fail_if_no_peer_cert = false\n"
	}
	if r.stream {
		conf += fmt.Sprintf("stream.listeners.tcp.1 = 127.0.0.1:%d\nstream.advertised_host = 127.0.0.1\nstream.advertised_port = %d\n",
			r.streamPort, r.streamPort)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "rabbitmq.conf"), []byte(conf), 0o644); err != nil {
		return fmt.Errorf("write rabbitmq.conf: %w", err)
	}
	return nil
}

// start boots the node and waits until it accepts AMQP connections.
func (r *Rabbit) start() error {
	r.url = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", r.port)
	if err := r.writeConf(); err != nil {
		return err
	}
	_ = os.Remove(r.pidFile()) // a killed node leaves it behind
	logf, err := os.OpenFile(r.startupLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open rabbitmq startup log: %w", err)
	}
	defer logf.Close()
	cmd := r.command("rabbitmq-server")
	cmd.Stdout, cmd.Stderr = logf, logf
	proc, err := Spawn("rabbitmq", cmd)
	if err != nil {
		return err
	}
	if err := r.waitReady(proc); err != nil {
		r.killProc(proc)
		return err
	}
	r.mu.Lock()
	r.proc = proc
	r.mu.Unlock()
	return nil
}

func (r *Rabbit) waitReady(proc *Process) error {
	deadline := time.Now().Add(scaled(rabbitStartTimeout))
	for time.Now().Before(deadline) {
		if proc.Exited() {
			tail := r.logTail()
			if strings.Contains(tail, "eaddrinuse") {
				return fmt.Errorf("rabbitmq on port %d or %d: %w", r.port, r.distPort, errInUse)
			}
			if strings.Contains(tail, "seems to be in use by another Erlang node") {
				// epmd has not yet noticed that the killed incarnation is gone.
				return fmt.Errorf("rabbitmq node name %s: %w", r.node, errInUse)
			}
			return fmt.Errorf("rabbitmq exited during start: %v%s", proc.cmd.ProcessState, tail)
		}
		if pingRabbit(r.url) == nil && r.pingStream() == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("rabbitmq not accepting connections after %v%s", scaled(rabbitStartTimeout), r.logTail())
}

func pingRabbit(url string) error {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(time.Second)})
	if err != nil {
		return err
	}
	return conn.Close()
}

// pingStream checks that the stream listener accepts connections, if the node has one.
func (r *Rabbit) pingStream() error {
	if !r.stream {
		return nil
	}
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", r.streamPort), time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

// beamPid reads the Erlang VM's OS pid from the pid file (0 if unknown).
func (r *Rabbit) beamPid() int {
	data, err := os.ReadFile(r.pidFile())
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

// killProc SIGKILLs the node's process group, the VM named in the pid file
// and the VM's descendants (erl_child_setup, which leaves the group with
// setsid, and its port programs).
func (r *Rabbit) killProc(proc *Process) {
	pids := []int{proc.PID()}
	if pid := r.beamPid(); pid != 0 && pid != proc.PID() {
		pids = append(pids, pid)
	}
	for _, pid := range pids[:len(pids):len(pids)] {
		pids = append(pids, descendants(pid)...)
	}
	proc.Kill()
	for _, pid := range pids {
		killPid(pid, 5*time.Second)
	}
}

// URL returns the AMQP URL for the guest user.
func (r *Rabbit) URL() string { return r.url }

// External reports whether the broker comes from WALBOX_TEST_AMQP_URL.
func (r *Rabbit) External() bool { return r.external }

// Node returns the Erlang node name; "" when external.
func (r *Rabbit) Node() string { return r.node }

// Port returns the AMQP port; 0 when external.
func (r *Rabbit) Port() int { return r.port }

// Dir returns the node directory; "" when external.
func (r *Rabbit) Dir() string { return r.dir }

// PID returns the OS pid of the node's Erlang VM, or 0 when stopped or external.
func (r *Rabbit) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil || r.proc.Exited() {
		return 0
	}
	if pid := r.beamPid(); pid != 0 {
		return pid
	}
	return r.proc.PID()
}

// Stop shuts the node down gracefully with rabbitmqctl stop and waits until
// its processes are gone.
func (r *Rabbit) Stop(tb TB) {
	tb.Helper()
	r.mustOwn(tb, "Stop")
	proc := r.takeProc(tb)
	_, err := r.ctl("stop", r.pidFile())
	if !proc.Wait(scaled(rabbitStopTimeout)) || err != nil {
		r.killProc(proc)
		tb.Fatalf("testenv: rabbitmq did not stop gracefully (%v); killed it%s", err, r.logTail())
	}
	r.killProc(proc) // reaps leftovers, if any
}

// Kill SIGKILLs the node's VM and its children, as in a crash. The shared
// epmd is left alone.
func (r *Rabbit) Kill(tb TB) {
	tb.Helper()
	r.mustOwn(tb, "Kill")
	r.killProc(r.takeProc(tb))
}

// Start boots a stopped or killed node again on the same ports and mnesia
// directory.
func (r *Rabbit) Start(tb TB) {
	tb.Helper()
	r.mustOwn(tb, "Start")
	if r.PID() != 0 {
		tb.Fatal("testenv: rabbitmq is already running")
	}
	var err error
	for range startAttempts {
		// Retry a bind failure: sockets of the old node may linger briefly.
		if err = r.start(); !errors.Is(err, errInUse) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		tb.Fatalf("testenv: restart rabbitmq: %v", err)
	}
}

func (r *Rabbit) takeProc(tb TB) *Process {
	tb.Helper()
	r.mu.Lock()
	proc := r.proc
	r.proc = nil
	r.mu.Unlock()
	if proc == nil {
		tb.Fatal("testenv: rabbitmq is not running")
	}
	return proc
}

func (r *Rabbit) mustOwn(tb TB, op string) {
	tb.Helper()
	switch {
	case r.external:
		tb.Fatalf("testenv: %s on an external rabbitmq (%s); call RequireOwn first", op, EnvAMQPURL)
	case r.shared:
		tb.Fatalf("testenv: %s on the shared rabbitmq; use StartRabbit for a node of your own", op)
	}
}

// Ctl runs rabbitmqctl against this node and returns its output; it fails
// the test on error.
func (r *Rabbit) Ctl(tb TB, args ...string) string {
	tb.Helper()
	if r.external {
		tb.Fatalf("testenv: Ctl on an external rabbitmq (%s); call RequireOwn first", EnvAMQPURL)
	}
	out, err := r.ctl(args...)
	if err != nil {
		tb.Fatalf("testenv: %v (args %s)\n%s", err, strings.Join(args, " "), out)
	}
	return out
}

// MemoryAlarm raises (on) or clears the node's memory alarm, as RabbitMQ does when it runs
// short of memory: every publishing connection is blocked until it clears. The node must be
// the test's own.
func (r *Rabbit) MemoryAlarm(tb TB, on bool) {
	tb.Helper()
	r.mustOwn(tb, "MemoryAlarm")
	expr := "rabbit_alarm:clear_alarm({resource_limit, memory, node()})."
	if on {
		expr = "rabbit_alarm:set_alarm({{resource_limit, memory, node()}, []})."
	}
	r.Ctl(tb, "eval", expr)
}

func (r *Rabbit) ctl(args ...string) (string, error) {
	cmd := r.command("rabbitmqctl", append([]string{"-n", r.node}, args...)...)
	return run("rabbitmqctl", cmd, scaled(rabbitCtlTimeout))
}

// command runs a program of the node's RabbitMQ (rabbitmq-server, rabbitmqctl) in the node's
// directory and environment; in a chroot, it runs there as root, the user the node runs as, so
// that both read the node's own Erlang cookie.
func (r *Rabbit) command(name string, args ...string) *exec.Cmd {
	path := RabbitBin(name)
	switch {
	case r.root != "":
		path = filepath.Join(rabbitBinDir, name)
	case r.binDir != "":
		path = filepath.Join(r.binDir, name)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir, cmd.Env = inRoot(r.root, r.dir), r.env()
	if r.root != "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: r.root}
	}
	return cmd
}

// shutdown kills the node and removes its directory; nothing in it is kept.
func (r *Rabbit) shutdown() {
	r.mu.Lock()
	proc := r.proc
	r.proc = nil
	r.mu.Unlock()
	if proc != nil {
		r.killProc(proc)
	}
	if r.dir != "" {
		_ = os.RemoveAll(r.dir)
	}
}
