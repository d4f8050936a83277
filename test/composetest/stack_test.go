//go:build compose

package composetest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/test/checker"
	"github.com/walbox/walbox/test/dockerenv"
)

// shared is the project of the real docker-compose.yml that the tests below use in turn, in the
// order they are written; TestMain takes it down.
var shared *dockerenv.Project

// stack returns the shared project, which TestComposeUp brought up.
func stack(t *testing.T) *dockerenv.Project {
	t.Helper()
	requireEngine(t)
	if shared == nil {
		t.Fatal("the compose project is not up: see TestComposeUp")
	}
	return shared
}

// address returns the service's address on the project's network (ports are not published on
// the host: the engine runs without a userland proxy).
func address(t *testing.T, p *dockerenv.Project, service string, port int) string {
	t.Helper()
	s, err := p.State(t.Context(), service)
	if err != nil || s.IP == "" {
		t.Fatalf("address of %s: %v (state %s)", service, err, s)
	}
	return fmt.Sprintf("%s:%d", s.IP, port)
}

func databaseURL(t *testing.T, p *dockerenv.Project) string {
	return "postgres://app:app@" + address(t, p, "postgres", 5432) + "/app?sslmode=disable"
}

func amqpURL(t *testing.T, p *dockerenv.Project) string {
	return "amqp://app:app@" + address(t, p, "rabbitmq", 5672) + "/"
}

// `docker-compose up` brings every service up in the order the compose file promises.
func TestComposeUp(t *testing.T) {
	p := newProject(t, "walboxcompose", filepath.Join(repo, "docker-compose.yml"))
	shared = p
	start := time.Now()
	problems, timeline := up(t.Context(), p, 3*time.Minute)
	t.Logf("up in %v:\n%s", time.Since(start).Round(time.Second), timeline)
	for _, problem := range problems {
		t.Error(problem)
	}
	for svc := range startOrder {
		if s, err := p.State(t.Context(), svc); err == nil && s.RestartCount > 0 {
			t.Logf("note: its restart policy restarted %s during up (%s); see the timeline", svc, s)
		}
	}
	if t.Failed() {
		shared = nil
	}
}

// POST /orders on the orders service leads to exactly one notification per order.
func TestOrdersNotifyOnce(t *testing.T) {
	p := stack(t)
	base := "http://" + address(t, p, "orders", 8080)
	const n = 20
	want := map[string]bool{}
	for i := range n {
		body := fmt.Sprintf(`{"customer_id": %q, "amount_cents": %d}`, uuid.NewString(), 100+i)
		resp, err := http.Post(base+"/orders", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var order struct{ ID string }
		err = json.NewDecoder(resp.Body).Decode(&order)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /orders: status %d, %v", resp.StatusCode, err)
		}
		want[order.ID] = true
	}
	conn, err := pgx.Connect(t.Context(), databaseURL(t, p))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	count := func() map[string]int {
		got := map[string]int{}
		rows, err := conn.Query(t.Context(), "SELECT order_id::text FROM notifications")
		if err != nil {
			return got // the notifier creates the table
		}
		for rows.Next() {
			var id string
			if rows.Scan(&id) == nil && want[id] {
				got[id]++
			}
		}
		return got
	}
	deadline := time.Now().Add(time.Minute)
	for len(count()) < n && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // a duplicate would come right after
	got := count()
	for id := range want {
		if got[id] != 1 {
			t.Errorf("order %s: %d notifications, want 1", id, got[id])
		}
	}
}

// `docker-compose restart walbox`, `docker-compose kill -s KILL walbox` and a crash of the relay
// (its process killed with SIGKILL, the restart policy bringing it back) lose nothing while rows
// are written.
func TestRelayRestartAndKillLoseNothing(t *testing.T) {
	p := stack(t)
	ctx := t.Context()
	mqURL := amqpURL(t, p)
	const queue = "compose-checker"
	bindQueue(t, mqURL, queue, "outbox", "checker.event")
	v, err := checker.NewVerifier(checker.VerifierConfig{URL: mqURL, Queue: queue, Stall: time.Minute, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	v.Start(ctx)
	defer v.Stop()
	w, err := checker.NewWriter(checker.WriterConfig{DatabaseURL: databaseURL(t, p), Name: "compose", Seed: 14,
		MaxTx: 10, Pause: 10 * time.Millisecond, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWriting := context.WithCancel(ctx)
	written := make(chan error, 1)
	go func() { written <- w.Run(wctx) }()

	compose := func(args ...string) func() {
		return func() {
			if _, err := p.Compose(ctx, args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, fault := range []struct {
		name     string
		do       func()
		byPolicy bool // the restart policy, not the test or the command, starts it again
	}{
		{"docker-compose restart walbox", compose("restart", "walbox"), false},
		{"docker-compose kill -s KILL walbox", func() {
			compose("kill", "-s", "KILL", "walbox")()
			// The engine counts `docker kill` as a deliberate stop: the restart policy leaves
			// the container down (Docker 20.10, as every version since 17.06). Start it as an
			// operator would; the next fault is the crash the policy is for.
			time.Sleep(3 * time.Second)
			if s := relayState(t, p); s.Status == "exited" {
				t.Logf("after docker-compose kill: %s; the restart policy left it down, starting it again", s)
				compose("start", "walbox")()
			}
		}, false},
		{"SIGKILL to the relay's process (a crash)", func() {
			// The container's main process is walbox; its pid on the host is the engine's.
			if err := syscall.Kill(relayState(t, p).Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		time.Sleep(3 * time.Second)
		before := relayState(t, p)
		fault.do()
		after := waitRelayBack(t, p, before, fault.name)
		if fault.byPolicy && after.RestartCount != before.RestartCount+1 {
			t.Errorf("%s: restart count %d before, %d after: want the restart policy to have started it once",
				fault.name, before.RestartCount, after.RestartCount)
		}
	}
	time.Sleep(3 * time.Second)
	stopWriting()
	if err := <-written; err != nil {
		t.Fatalf("writer: %v", err)
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Flush(fctx); err != nil {
		t.Error(err)
	}
	rep := v.Await(ctx, w.Committed(), 2*time.Minute)
	rep.Unresolved = w.Stats().Unresolved
	t.Logf("checker: %s", rep)
	if err := rep.Err(); err != nil || rep.TimedOut || rep.Stalled {
		t.Errorf("%v (timed out %t, stalled %t)", err, rep.TimedOut, rep.Stalled)
	}
	if rep.Committed < 500 {
		t.Errorf("only %d rows committed: the workload did not run across the faults", rep.Committed)
	}
}

func relayState(t *testing.T, p *dockerenv.Project) dockerenv.State {
	t.Helper()
	s, err := p.State(t.Context(), "walbox")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitRelayBack waits until the walbox container was started again after the fault and is
// healthy, and returns its state then.
func waitRelayBack(t *testing.T, p *dockerenv.Project, before dockerenv.State, fault string) dockerenv.State {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s := relayState(t, p)
		if s.StartedAt.After(before.StartedAt) && s.Ready() {
			t.Logf("%s: walbox back and healthy (%s)", fault, s)
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: walbox not back within 2 minutes: %s\n%s", fault, s, p.Logs(t.Context(), "walbox"))
		}
		time.Sleep(time.Second)
	}
}

// bindQueue declares a durable queue bound to the exchange with the key.
func bindQueue(t *testing.T, url, queue, exchange, key string) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, key, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
}

// testPackages are the packages the test profile runs inside compose, by module folder: every
// package whose tests use PostgreSQL or RabbitMQ, except three. test/faults injects faults into
// the servers (kills, restarts, proxies): its tests need servers of their own and skip on shared
// ones. internal/testenv tests the harness's own server management, which external servers
// bypass. test/bench sets up the benchmark's relays and loads, which `make bench` runs. `make test`
// runs all three. The profile took 3m40s on two busy cores.
var testPackages = []struct{ module, pkgs string }{
	{".", "./outbox/ ./consumer/ ./publisher/ ./replication/ ./decoder/ ./inspect/ ./shard/"},
	{"test", "./checker/ ./e2e/"},
	{"examples", "./examplee2e/"},
}

// testProfileScript is the test profile's command: go test in each module's folder, every module
// even after a failure, failing if one failed.
func testProfileScript() string {
	var b strings.Builder
	b.WriteString("rc=0; ")
	for _, m := range testPackages {
		fmt.Fprintf(&b, "(cd %s && go test -race -count=1 -timeout 30m -v %s) || rc=1; ", m.module, m.pkgs)
	}
	b.WriteString("exit $rc")
	return b.String()
}

// The test profile runs integration tests inside compose against the compose servers.
func TestTestProfile(t *testing.T) {
	p := stack(t)
	start := time.Now()
	args := []string{"--profile", "test", "run", "--rm", "test", "sh", "-c", testProfileScript()}
	out, err := p.Compose(t.Context(), args...)
	t.Logf("test profile ran in %v", time.Since(start).Round(time.Second))
	passed := regexp.MustCompile(`(?m)^\s*--- PASS`).FindAllString(out, -1)
	skipped := regexp.MustCompile(`(?m)^\s*--- SKIP`).FindAllString(out, -1)
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "ok ") || strings.HasPrefix(line, "FAIL") || strings.HasPrefix(line, "--- FAIL") || strings.Contains(line, "--- SKIP") {
			t.Log(line)
		}
	}
	t.Logf("%d tests passed, %d skipped", len(passed), len(skipped))
	if err != nil {
		t.Fatalf("go test in the test profile: %v\n%s", err, tailLines(out, 60))
	}
	for _, m := range testPackages {
		for _, pkg := range strings.Fields(m.pkgs) {
			name := path.Join("github.com/walbox/walbox", m.module, pkg)
			if !regexp.MustCompile(`(?m)^ok\s+` + regexp.QuoteMeta(name) + `\s`).MatchString(out) {
				t.Errorf("package %s did not pass", name)
			}
		}
	}
}

// With its slot gone, the walbox container does not come back healthy: its health check command
// fails, it refuses to recreate the slot, and the restart policy does not change that (walbox
// exits, the policy starts it again, and it exits again: a crash loop that is never healthy).
// Runs last: it breaks the stack.
func TestHealthCheckFailsWithoutSlot(t *testing.T) {
	p := stack(t)
	ctx := t.Context()
	if _, err := p.Compose(ctx, "stop", "walbox"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, databaseURL(t, p))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot('walbox')"); err != nil {
		t.Fatal(err)
	}
	out, err := p.Compose(ctx, "run", "--rm", "--no-deps", "walbox", "status")
	if err == nil {
		t.Errorf("walbox status (the health check's command) succeeded without a slot:\n%s", out)
	}
	rec, err := p.Record(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Compose(ctx, "start", "walbox"); err != nil {
		t.Fatal(err)
	}
	// Long enough for the compose file's health check to report a running container unhealthy.
	window := relayState(t, p).Check.Unhealthy() + 10*time.Second
	deadline := time.Now().Add(window)
	var s dockerenv.State
	for time.Now().Before(deadline) {
		if s = relayState(t, p); s.Health == "healthy" {
			t.Fatalf("walbox is healthy without its slot: %s\n%s", s, p.Logs(ctx, "walbox"))
		}
		time.Sleep(time.Second)
	}
	starts := 0
	for _, e := range rec.Stop() {
		if e.Service == "walbox" && e.Action == "start" {
			starts++
		}
	}
	if s.Health != "unhealthy" && starts < 2 {
		t.Errorf("walbox is neither unhealthy nor restarted by its policy %v after it was started without its slot: %s, %d starts",
			window, s, starts)
	}
	t.Logf("walbox without its slot, %v after it was started: %s, %d starts; it logs:\n%s", window, s, starts,
		tailLines(p.Logs(ctx, "walbox"), 2))
	var slots int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'walbox'").Scan(&slots); err != nil || slots != 0 {
		t.Errorf("slot walbox: %d (%v); walbox must not recreate it", slots, err)
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
