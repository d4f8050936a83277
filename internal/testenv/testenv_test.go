package testenv_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/internal/testenv"
)

func TestMain(m *testing.M) {
	code := testenv.Main(m)
	if left := leftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "processes left running: %v\n", left)
		code = 1
	}
	os.Exit(code)
}

// leftovers lists processes whose command line names a directory of this
// test binary.
func leftovers() []string {
	mark := fmt.Sprintf("walbox-testenv-%d-", os.Getpid())
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var left []string
	for _, path := range paths {
		cmdline, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(cmdline), mark) {
			left = append(left, path)
		}
	}
	return left
}

func TestPostgresDefaults(t *testing.T) {
	t.Parallel()
	p := testenv.StartPostgres(t)
	testenv.RequireOwn(t, p)
	for name, want := range map[string]string{
		"wal_level":               "logical",
		"fsync":                   "off",
		"max_replication_slots":   "20",
		"max_wal_senders":         "20",
		"listen_addresses":        "127.0.0.1",
		"unix_socket_directories": p.Dir(),
	} {
		if got := show(t, p.URL(), name); got != want {
			t.Errorf("SHOW %s = %q, want %q", name, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(p.Dir(), fmt.Sprintf(".s.PGSQL.%d", p.Port()))); err != nil {
		t.Errorf("unix socket not in the server's directory: %v", err)
	}
	if want := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.Port()); p.URL() != want {
		t.Errorf("URL() = %q, want %q", p.URL(), want)
	}
}

func TestPostgresWithSetting(t *testing.T) {
	t.Parallel()
	p := testenv.StartPostgres(t,
		testenv.WithSetting("wal_level", "replica"),
		testenv.WithSetting("wal_sender_timeout", "5s"),
		testenv.WithSetting("application_name", "it's quoted"))
	testenv.RequireOwn(t, p)
	for name, want := range map[string]string{
		"wal_level":          "replica",
		"wal_sender_timeout": "5s",
		"application_name":   "it's quoted",
	} {
		if got := show(t, p.URL(), name); got != want {
			t.Errorf("SHOW %s = %q, want %q", name, got, want)
		}
	}
}

func TestPostgresStopStartKeepsData(t *testing.T) {
	t.Parallel()
	var pids []int
	t.Run("life", func(t *testing.T) {
		p := testenv.StartPostgres(t)
		testenv.RequireOwn(t, p)
		url := p.URL()
		p.Exec(t, url, "CREATE TABLE kept (v int)")
		for i, mode := range []string{"immediate", "fast", "smart"} {
			p.Exec(t, url, "INSERT INTO kept VALUES ($1)", i)
			pid := p.PID()
			pids = append(pids, pid)
			pids = append(pids, testenv.Descendants(pid)...)
			p.Stop(t, mode)
			if p.PID() != 0 || testenv.PidAlive(pid) {
				t.Fatalf("postmaster %d still running after Stop(%s)", pid, mode)
			}
			if err := ping(url); err == nil {
				t.Fatalf("connect after Stop(%s) succeeded", mode)
			}
			p.Start(t)
			if p.URL() != url {
				t.Fatalf("URL after Start = %q, want %q", p.URL(), url)
			}
			if got := queryInt(t, url, "SELECT count(*) FROM kept"); got != i+1 {
				t.Fatalf("after Stop(%s) and Start: %d rows, want %d", mode, got, i+1)
			}
		}
		pids = append(pids, p.PID())
		pids = append(pids, testenv.Descendants(p.PID())...)
	})
	assertGone(t, pids)
}

// A standby whose WAL receiver was killed goes through a crash restart: for a moment it refuses
// or resets connections. Promote, called right then, waits it out and promotes it.
func TestPromoteWaitsOutACrashRestart(t *testing.T) {
	t.Parallel()
	primary := testenv.StartPostgres(t)
	testenv.RequireOwn(t, primary)
	standby := testenv.StartStandby(t, primary, "promoted")
	receiver := standby.PauseReceiver(t)
	if err := syscall.Kill(receiver, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	standby.Promote(t)
	if got := queryInt(t, standby.URL(), "SELECT pg_catalog.pg_is_in_recovery()::int"); got != 0 {
		t.Fatal("the standby is still in recovery after Promote")
	}
}

func TestNewDatabaseIsolationAndCleanup(t *testing.T) {
	t.Parallel()
	p := testenv.SharedPostgres(t)
	var dbs []string
	t.Run("use", func(t *testing.T) {
		a, b := p.NewDatabase(t), p.NewDatabase(t)
		if a == b {
			t.Fatalf("two databases share the URL %s", a)
		}
		p.Exec(t, a, "CREATE TABLE only_in_a (v int)")
		if got := queryInt(t, b, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'"); got != 0 {
			t.Fatal("table of database a visible in database b")
		}
		p.Exec(t, a, "SELECT pg_create_logical_replication_slot($1, 'test_decoding')", testenv.UniqueName("idle"))
		holdSlot(t, a, testenv.UniqueName("active"))
		dbs = []string{dbName(a), dbName(b)}
	})
	left := queryInt(t, p.URL(), "SELECT count(*) FROM pg_database WHERE datname = ANY($1)", dbs)
	if left != 0 {
		t.Errorf("%d of databases %v left after cleanup", left, dbs)
	}
	if got := queryInt(t, p.URL(), "SELECT count(*) FROM pg_replication_slots WHERE database = ANY($1)", dbs); got != 0 {
		t.Errorf("%d slots left after cleanup", got)
	}
}

// holdSlot creates a logical slot in dbURL and keeps a walsender streaming
// from it until the end of the test.
func holdSlot(t *testing.T, dbURL, slot string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, dbURL+"&replication=database")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "CREATE_REPLICATION_SLOT "+slot+" LOGICAL test_decoding").ReadAll(); err != nil {
		t.Fatalf("create slot: %v", err)
	}
	conn.Frontend().Send(&pgproto3.Query{String: "START_REPLICATION SLOT " + slot + " LOGICAL 0/0"})
	if err := conn.Frontend().Flush(); err != nil {
		t.Fatal(err)
	}
	msg, err := conn.ReceiveMessage(ctx)
	if _, ok := msg.(*pgproto3.CopyBothResponse); !ok || err != nil {
		t.Fatalf("START_REPLICATION: got %T, %v", msg, err)
	}
}

func TestExternalPostgres(t *testing.T) {
	shared := testenv.SharedPostgres(t)
	t.Setenv(testenv.EnvDatabaseURL, shared.URL())
	p := testenv.StartPostgres(t)
	if !p.External() || p.URL() != shared.URL() {
		t.Fatalf("External() = %v, URL() = %q; want the external server", p.External(), p.URL())
	}
	db := p.NewDatabase(t)
	p.Exec(t, db, "SELECT 1")
	if !skipped(t, func(t *testing.T) { testenv.RequireOwn(t, p) }) {
		t.Error("RequireOwn did not skip for an external server")
	}
}

func TestMissingBinary(t *testing.T) {
	t.Setenv(testenv.EnvDatabaseURL, "")
	t.Setenv("WALBOX_TEST_PG_BIN", t.TempDir())
	t.Setenv("CI", "false")
	if !skipped(t, func(t *testing.T) { testenv.StartPostgres(t) }) {
		t.Error("outside CI a missing binary did not skip")
	}
	t.Setenv("CI", "true")
	if got := outcome(func(tb testing.TB) { testenv.StartPostgres(tb) }); got != "fatal" {
		t.Errorf("under CI a missing binary gave %s, want fatal", got)
	}
}

func TestUniqueName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z0-9_]+$`)
	seen := map[string]bool{}
	for range 100 {
		name := testenv.UniqueName("Slot-Ä.x")
		if !valid.MatchString(name) || !strings.HasPrefix(name, "slot_") {
			t.Fatalf("UniqueName = %q, want [a-z0-9_]+ starting slot_", name)
		}
		if seen[name] {
			t.Fatalf("UniqueName repeated %q", name)
		}
		seen[name] = true
	}
}

// A server's port comes from below the ephemeral range: no outgoing connection takes it while
// the server is down (a node between stop_app and start_app). It stays locked, so no other test
// binary picks it, and this one hands it out once.
func TestFreePortsAreReservedBelowTheEphemeralRange(t *testing.T) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatal(err)
	}
	low, err := strconv.Atoi(strings.Fields(string(data))[0])
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 20 {
		addr := testenv.FreeAddr(t)
		port := addr[strings.LastIndexByte(addr, ':')+1:]
		if n, _ := strconv.Atoi(port); n >= low {
			t.Errorf("port %s is in the ephemeral range (from %d)", port, low)
		}
		if seen[port] {
			t.Errorf("port %s handed out twice", port)
		}
		seen[port] = true
		f, err := os.OpenFile(filepath.Join(os.TempDir(), testenv.PortLockDir, port), os.O_RDWR, 0)
		if err != nil {
			t.Errorf("port %s: no lock file: %v", port, err)
			continue
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			t.Errorf("port %s is not locked against other test binaries", port)
		}
		_ = f.Close()
	}
}

func TestRabbitRoundTrip(t *testing.T) {
	t.Parallel()
	r := testenv.SharedRabbit(t)
	if r != testenv.SharedRabbit(t) {
		t.Fatal("SharedRabbit returned a second node")
	}
	if !regexp.MustCompile(`^walbox-test-\d+-\d+@localhost$`).MatchString(r.Node()) {
		t.Errorf("Node() = %q", r.Node())
	}
	queue := testenv.UniqueName("q")
	publish(t, r.URL(), queue, "hello")
	if got := consume(t, r.URL(), queue); got != "hello" {
		t.Fatalf("consumed %q, want hello", got)
	}
}

// The shared stream node is one node per test binary, with a stream listener, apart from the
// shared AMQP node.
func TestSharedRabbitStream(t *testing.T) {
	t.Parallel()
	r := testenv.SharedRabbitStream(t)
	if r != testenv.SharedRabbitStream(t) {
		t.Fatal("SharedRabbitStream returned a second node")
	}
	if r.StreamURL() == "" {
		t.Fatal("the shared stream node has no stream listener")
	}
	if r == testenv.SharedRabbit(t) {
		t.Fatal("the shared stream node is the shared AMQP node")
	}
	queue := testenv.UniqueName("q")
	publish(t, r.URL(), queue, "hello")
	if got := consume(t, r.URL(), queue); got != "hello" {
		t.Fatalf("consumed %q, want hello", got)
	}
}

func TestRabbitKillStartStop(t *testing.T) {
	if testenv.Short() {
		t.Skip("three node boots; skipped with -short")
	}
	t.Parallel()
	var pids []int
	t.Run("life", func(t *testing.T) {
		r := testenv.StartRabbit(t)
		testenv.RequireOwn(t, r)
		queue := testenv.UniqueName("durable")
		publish(t, r.URL(), queue, "survives")
		// The queue's declaration goes to Mnesia's log asynchronously: a SIGKILL right after it
		// may lose the queue (seen under CI load). Sync the log, as a node that ran a while has.
		r.Ctl(t, "eval", "mnesia:sync_log().")

		beam := r.PID()
		pids = append([]int{beam}, testenv.Descendants(beam)...)
		if len(pids) < 2 {
			t.Fatalf("no erl_child_setup under beam %d", beam)
		}
		r.Kill(t)
		assertGone(t, pids)
		if err := pingRabbit(r.URL()); err == nil {
			t.Fatal("connect after Kill succeeded")
		}
		r.Start(t)
		if got := consume(t, r.URL(), queue); got != "survives" {
			t.Fatalf("after Kill and Start consumed %q, want survives", got)
		}
		if out := r.Ctl(t, "list_queues", "name"); !strings.Contains(out, queue) {
			t.Errorf("rabbitmqctl list_queues does not show %s:\n%s", queue, out)
		}
		beam = r.PID()
		pids = append(pids, beam)
		pids = append(pids, testenv.Descendants(beam)...)
		r.Stop(t)
		assertGone(t, pids)
		r.Start(t)
		pids = append(pids, r.PID())
		pids = append(pids, testenv.Descendants(r.PID())...)
	})
	assertGone(t, pids)
}

// TestCrashLeavesNothing kills a test binary holding servers with SIGKILL:
// the servers must die with it.
func TestCrashLeavesNothing(t *testing.T) {
	t.Parallel()
	if os.Getenv("WALBOX_TESTENV_CRASH_CHILD") != "" {
		t.Skip("already the child")
	}
	if testenv.Short() {
		t.Skip("boots a node in a child process; skipped with -short")
	}
	if os.Getenv(testenv.EnvDatabaseURL) != "" || os.Getenv(testenv.EnvAMQPURL) != "" {
		t.Skip("test needs servers the harness starts itself; external servers are configured")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(), "WALBOX_TESTENV_CRASH_CHILD=1")
	pids, dirs := readChildServers(t, startPiped(t, cmd))
	for _, pid := range append([]int(nil), pids...) {
		pids = append(pids, testenv.Descendants(pid)...)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	assertGone(t, pids)
	for _, dir := range dirs {
		_ = os.RemoveAll(dir) // the next Main would sweep them
	}
}

func readChildServers(t *testing.T, out interface{ Read([]byte) (int, error) }) (pids []int, dirs []string) {
	t.Helper()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var pid int
		var dir string
		if _, err := fmt.Sscanf(strings.TrimSpace(sc.Text()), "SERVER %d %s", &pid, &dir); err == nil {
			pids, dirs = append(pids, pid), append(dirs, dir)
		}
		if strings.Contains(sc.Text(), "READY") {
			return pids, dirs
		}
	}
	t.Fatalf("child exited before its servers were ready (%v)", sc.Err())
	return nil, nil
}

func TestCrashChild(t *testing.T) {
	if os.Getenv("WALBOX_TESTENV_CRASH_CHILD") == "" {
		t.Skip("run by TestCrashLeavesNothing")
	}
	p := testenv.StartPostgres(t)
	fmt.Printf("SERVER %d %s\n", p.PID(), p.Dir())
	r := testenv.StartRabbit(t)
	fmt.Printf("SERVER %d %s\nREADY\n", r.PID(), r.Dir())
	time.Sleep(time.Minute)
}

// assertGone waits until none of pids runs any more.
func assertGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for testenv.PidAlive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if testenv.PidAlive(pid) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			t.Errorf("process %d still running: %q", pid, cmdline)
		}
	}
}

func show(t *testing.T, url, name string) string {
	t.Helper()
	var v string
	queryRow(t, url, "SELECT current_setting($1)", []any{name}, &v)
	return v
}

func queryInt(t *testing.T, url, sql string, args ...any) int {
	t.Helper()
	var n int
	queryRow(t, url, sql, args, &n)
	return n
}

func queryRow(t *testing.T, url, sql string, args []any, dest any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, sql, args...).Scan(dest); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func ping(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

func dbName(url string) string { return url[strings.LastIndex(url, "/")+1 : strings.Index(url, "?")] }

func pingRabbit(url string) error {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		return err
	}
	return conn.Close()
}

// publish declares a durable queue and publishes a persistent message to it,
// waiting for the broker's confirm.
func publish(t *testing.T, url, queue, body string) {
	t.Helper()
	ch := channel(t, url)
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false,
		amqp.Publishing{Body: []byte(body), DeliveryMode: amqp.Persistent})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish not confirmed: ack %v, %v", ok, err)
	}
}

// consume takes one message from queue. A node that has just started after a crash may still be
// recovering its durable queues, and answers NOT_FOUND meanwhile: consume asks again for a while
// (on two cores busy with other tests, recovery has taken more than 30 s).
func consume(t *testing.T, url, queue string) string {
	t.Helper()
	var deliveries <-chan amqp.Delivery
	start := time.Now()
	for deadline := start.Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var err error
		deliveries, err = channel(t, url).Consume(queue, "", true, false, false, false, nil)
		var ae *amqp.Error
		if err == nil {
			break
		}
		if !errors.As(err, &ae) || ae.Code != amqp.NotFound || time.Now().After(deadline) {
			t.Fatalf("consume %s, %v after the first try: %v", queue, time.Since(start).Round(time.Second), err)
		}
	}
	select {
	case d := <-deliveries:
		return string(d.Body)
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery within 10s")
		return ""
	}
}

func channel(t *testing.T, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// skipped runs f as a subtest and reports whether it skipped.
func skipped(t *testing.T, f func(t *testing.T)) bool {
	var s bool
	t.Run("sub", func(t *testing.T) {
		t.Cleanup(func() { s = t.Skipped() })
		f(t)
	})
	return s
}

// recorder is a testing.TB that records how a helper ended instead of
// failing the test.
type recorder struct {
	testing.TB
	ended string
}

func (r *recorder) Helper()                  {}
func (r *recorder) Cleanup(func())           {}
func (r *recorder) Fatal(...any)             { r.end("fatal") }
func (r *recorder) Fatalf(string, ...any)    { r.end("fatal") }
func (r *recorder) Skip(...any)              { r.end("skip") }
func (r *recorder) Skipf(string, ...any)     { r.end("skip") }
func (r *recorder) Errorf(string, ...any)    { r.ended = "error" }
func (r *recorder) end(how string)           { r.ended = how; runtime.Goexit() }
func (r *recorder) Logf(string, ...any)      {}
func (r *recorder) Name() string             { return "recorder" }
func (r *recorder) Setenv(string, string)    {}
func (r *recorder) TempDir() string          { return os.TempDir() }
func (r *recorder) Failed() bool             { return r.ended == "fatal" || r.ended == "error" }
func (r *recorder) Skipped() bool            { return r.ended == "skip" }
func (r *recorder) Context() context.Context { return context.Background() }

// outcome runs f with a recorder in its own goroutine and returns how it ended.
func outcome(f func(tb testing.TB)) string {
	r := &recorder{ended: "returned"}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.ended
}

// Servers of newer releases run from cached Debian chroots: the version asked for answers, and
// it can be stopped and started again like the machine's own.
func TestNewerReleases(t *testing.T) {
	if testenv.Short() {
		t.Skip("builds Debian chroots on first use; skipped with -short")
	}
	for _, major := range []int{17, 18} {
		t.Run(fmt.Sprintf("postgres%d", major), func(t *testing.T) {
			t.Parallel()
			p := testenv.StartPostgres(t, testenv.PGVersion(major), testenv.WithSetting("max_wal_senders", "7"))
			testenv.RequireOwn(t, p)
			if got, want := show(t, p.URL(), "server_version_num")[:2], strconv.Itoa(major); got != want {
				t.Errorf("server_version_num starts %s, want %s", got, want)
			}
			if got := show(t, p.URL(), "max_wal_senders"); got != "7" {
				t.Errorf("max_wal_senders = %s, want 7", got)
			}
			p.Stop(t, "immediate")
			p.Start(t)
			if got := show(t, p.URL(), "wal_level"); got != "logical" {
				t.Errorf("after a restart wal_level = %s, want logical", got)
			}
		})
	}
	t.Run("rabbitmq4.0", func(t *testing.T) {
		t.Parallel()
		r := testenv.StartRabbit(t, testenv.RabbitVersion("4.0"))
		testenv.RequireOwn(t, r)
		conn, err := amqp.Dial(r.URL())
		if err != nil {
			t.Fatal(err)
		}
		version, _ := conn.Properties["version"].(string)
		conn.Close()
		if !strings.HasPrefix(version, "4.0.") {
			t.Errorf("server version %q, want 4.0.x", version)
		}
		if out := r.Ctl(t, "status"); !strings.Contains(out, r.Node()) {
			t.Errorf("rabbitmqctl status names no %s:\n%s", r.Node(), out)
		}
		r.Kill(t)
		r.Start(t)
		queue := testenv.UniqueName("q")
		publish(t, r.URL(), queue, "hello")
		if got := consume(t, r.URL(), queue); got != "hello" {
			t.Fatalf("consumed %q, want hello", got)
		}
	})
}

// startPiped starts cmd and returns its standard output. The test's end kills it.
func startPiped(t *testing.T, cmd *exec.Cmd) io.Reader {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return out
}
