package faults_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// world is one test's database (outbox migrated, slot created), exchange and queue, and the
// relays, writers and verifiers running on them.
type world struct {
	t         *testing.T
	pg        *testenv.Postgres
	rabbit    *testenv.Rabbit
	db        string // superuser URL of the test's database
	relayDB   string // database URL the relay uses (a proxy, another role); default db
	relayMQ   string // AMQP URL the relay uses; default the broker's
	slot      string
	exchange  string
	queue     string
	binding   string     // the queue's binding key
	queueArgs amqp.Table // the queue's arguments
	conn      *pgx.Conn
	relays    []*relay // every relay started, newest last
}

// newWorld creates a database on pg, runs `walbox migrate` in it and declares the exchange as
// walbox does, with a durable queue bound to every event type.
func newWorld(t *testing.T, pg *testenv.Postgres, rabbit *testenv.Rabbit) *world {
	t.Helper()
	return newWorldBound(t, pg, rabbit, "#")
}

// newWorldBound is newWorld with the queue bound by key only.
func newWorldBound(t *testing.T, pg *testenv.Postgres, rabbit *testenv.Rabbit, key string) *world {
	t.Helper()
	return newWorldWith(t, pg, rabbit, key, nil)
}

// newWorldWith is newWorld with the queue bound by key and declared with args.
func newWorldWith(t *testing.T, pg *testenv.Postgres, rabbit *testenv.Rabbit, key string, args amqp.Table) *world {
	t.Helper()
	return newWorldOn(t, pg, rabbit, testenv.UniqueName("slot"), key, args)
}

// newWorldOn is newWorldWith on the slot named slot.
func newWorldOn(t *testing.T, pg *testenv.Postgres, rabbit *testenv.Rabbit, slot, key string, args amqp.Table) *world {
	t.Helper()
	db := pg.NewDatabase(t)
	w := &world{t: t, pg: pg, rabbit: rabbit, db: db, relayDB: db, relayMQ: rabbit.URL(),
		slot: slot, exchange: testenv.UniqueName("ex"), queue: testenv.UniqueName("q"),
		binding: key, queueArgs: args}
	w.conn = pg.Conn(t, db)
	if out, code := w.walbox(nil, "migrate"); code != 0 {
		t.Fatalf("walbox migrate exited %d:\n%s", code, out)
	}
	w.declare()
	return w
}

// in returns a copy of the world for the subtest t, so that failures are reported to it.
func (w *world) in(t *testing.T) *world {
	c := *w
	c.t = t
	c.relays = nil
	return &c
}

// env is the relay's environment: the test binary's, without any WALBOX_ setting, plus the world's.
func (w *world) env(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WALBOX_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"WALBOX_DATABASE_URL="+w.relayDB,
		"WALBOX_AMQP_URL="+w.relayMQ,
		"WALBOX_SLOT="+w.slot,
		"WALBOX_EXCHANGE="+w.exchange,
		"WALBOX_STATUS_INTERVAL=250ms",
		"WALBOX_LOG_FORMAT=text",
		"WALBOX_LISTEN=off",
		"WALBOX_RELAY_URL=off",
		"WALBOX_CANARY_INTERVAL=0", // the verifiers read every message on #; a test that wants canaries sets it
	)
	return append(env, extra...) // os/exec keeps the last of duplicate variables
}

// walbox runs a walbox command to completion and returns its combined output and exit code.
func (w *world) walbox(extraEnv []string, args ...string) (string, int) {
	w.t.Helper()
	cmd := exec.Command(walboxBin(w.t), args...)
	cmd.Env = w.env(extraEnv)
	return testenv.Run(w.t, cmd, 2*time.Minute)
}

// declare declares the exchange as walbox does (with its alternate exchange) and the queue.
func (w *world) declare() {
	w.t.Helper()
	conn, ch := dialAMQP(w.t, w.rabbit.URL())
	defer conn.Close()
	ae := w.exchange + ".unroutable"
	if err := ch.ExchangeDeclare(ae, "fanout", true, false, false, false, nil); err != nil {
		w.t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(w.exchange, "topic", true, false, false, false, amqp.Table{"alternate-exchange": ae}); err != nil {
		w.t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(w.queue, true, false, false, false, w.queueArgs); err != nil {
		w.t.Fatal(err)
	}
	if err := ch.QueueBind(w.queue, w.binding, w.exchange, false, nil); err != nil {
		w.t.Fatal(err)
	}
}

func dialAMQP(t *testing.T, u string) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	var conn *amqp.Connection
	var err error
	for range 100 {
		if conn, err = amqp.Dial(u); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return conn, ch
}

// writer starts a checker.Writer on the world's table in the background; stop ends it.
type writer struct {
	*checker.Writer
	cancel context.CancelFunc
	done   chan struct{}
}

// startWriter runs a Writer with cfg (database and logging filled in) until stop.
func (w *world) startWriter(cfg checker.WriterConfig) *writer {
	w.t.Helper()
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = w.db
	}
	if cfg.Logf == nil {
		cfg.Logf = w.t.Logf
	}
	cw, err := checker.NewWriter(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	return w.runWriter(cw)
}

// runWriter runs cw in the background until stop.
func (w *world) runWriter(cw *checker.Writer) *writer {
	ctx, cancel := context.WithCancel(context.Background())
	wr := &writer{Writer: cw, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(wr.done)
		_ = cw.Run(ctx)
	}()
	w.t.Cleanup(wr.stop)
	return wr
}

// stop ends the writer's Run and waits for it.
func (wr *writer) stop() {
	wr.cancel()
	<-wr.done
}

// newWriter returns a Writer the test drives itself.
func (w *world) newWriter(cfg checker.WriterConfig) *checker.Writer {
	w.t.Helper()
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = w.db
	}
	if cfg.Logf == nil {
		cfg.Logf = w.t.Logf
	}
	cw, err := checker.NewWriter(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(cw.Close)
	return cw
}

// startVerifier consumes the world's queue until the test ends.
func (w *world) startVerifier() *checker.Verifier {
	w.t.Helper()
	v, err := checker.NewVerifier(checker.VerifierConfig{URL: w.rabbit.URL(), Queue: w.queue, Logf: w.t.Logf,
		Stall: 45 * time.Second})
	if err != nil {
		w.t.Fatal(err)
	}
	v.Start(context.Background())
	w.t.Cleanup(v.Stop)
	return v
}

// verdict resolves the writer's unknown commits, waits for the verifier to have every committed
// row (bounded by timeout), logs the one-line summary and fails the test on any loss, phantom,
// order violation, malformed delivery or unresolved commit.
func (w *world) verdict(cw *checker.Writer, v *checker.Verifier, timeout time.Duration, rounds, faults int, extra string) checker.Report {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cw.Flush(ctx); err != nil {
		w.t.Errorf("writer: %v", err)
	}
	rep := v.Await(context.Background(), cw.Committed(), timeout)
	rep.Unresolved = cw.Stats().Unresolved
	st := cw.Stats()
	line := fmt.Sprintf("SUMMARY %s rounds=%d faults=%d %s unknown_commits=%d verifier_reconnects=%d",
		w.t.Name(), rounds, faults, rep, st.Unknown, v.Reconnects())
	if extra != "" {
		line += " " + extra
	}
	if rep.Stalled && len(w.relays) > 0 {
		// A stall is not a loss as long as the slot did not pass the missing rows: a fresh walbox
		// starts from the slot and must deliver them. The stall still fails the test. A fresh
		// relay may stall again; it is restarted while each one makes progress.
		w.t.Errorf("RELAY STALLED: nothing delivered for 45 s with %d rows missing\n%s%s", rep.Lost, w.relayStates(), w.queueState())
		for restarts := 1; rep.Stalled && restarts <= 3; restarts++ {
			lost := rep.Lost
			last := w.relays[len(w.relays)-1]
			for _, r := range w.relays {
				r.Kill()
			}
			w.startRelay(last.extra...)
			rep = v.Await(context.Background(), cw.Committed(), timeout)
			rep.Unresolved = cw.Stats().Unresolved
			line += fmt.Sprintf(" | after restart %d of walbox: %s", restarts, rep)
			if rep.Lost == lost {
				break
			}
		}
	}
	w.t.Log(line)
	soakReport(w.t.Name(), rep)
	if err := rep.Err(); err != nil {
		w.t.Errorf("%v\n%s\n%s%s", err, rep, w.relayStates(), w.queueState())
	}
	if rep.Committed == 0 {
		w.t.Error("the writer committed nothing: the test proved nothing")
	}
	return rep
}

// relayStates describes the relays still running, for failure messages, and names the known
// relay bug whose signature they show.
func (w *world) relayStates() string {
	var b strings.Builder
	for _, r := range w.relays {
		if r.Exited() {
			continue
		}
		st, err := r.status()
		fmt.Fprintf(&b, "relay pid %d: %+v %v\n", r.PID(), st, err)
		if err == nil && st.State == "streaming" && st.BrokerBlocked {
			b.WriteString("  RELAY BUG signature (docs/reliability.md, bug 1): \"streaming\" with broker_blocked and no " +
				"progress, though no alarm is set: the publish loop retries a dead AMQP session forever\n")
		}
	}
	return b.String()
}

// queueState describes the world's queue as the broker sees it, for failure messages: rows
// missing while messages wait in the queue are a stuck consumer, not a loss.
func (w *world) queueState() string {
	conn, err := amqp.Dial(w.rabbit.URL())
	if err != nil {
		return fmt.Sprintf("queue %s: dial: %v\n", w.queue, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Sprintf("queue %s: channel: %v\n", w.queue, err)
	}
	q, err := ch.QueueDeclarePassive(w.queue, true, false, false, false, w.queueArgs)
	if err != nil {
		return fmt.Sprintf("queue %s: %v\n", w.queue, err)
	}
	return fmt.Sprintf("queue %s: %d messages ready, %d consumers\n", q.Name, q.Messages, q.Consumers)
}

// progress waits until n more messages than now were delivered; on timeout it shows the relays.
func (w *world) progress(v *checker.Verifier, n int, timeout time.Duration) {
	w.t.Helper()
	want := v.Count() + n
	start := time.Now()
	for v.Count() < want {
		if time.Since(start) > timeout {
			w.t.Fatalf("timed out after %v waiting for %d deliveries (have %d)\n%s", timeout, want, v.Count(), w.relayStates())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// slotInfo reads the slot's row: whether it exists, its active pid and wal_status.
func (w *world) slotInfo() (exists bool, activePID int, walStatus string) {
	w.t.Helper()
	var pid *int32
	var status *string
	err := w.conn.QueryRow(context.Background(),
		"SELECT active_pid, wal_status FROM pg_replication_slots WHERE slot_name = $1", w.slot).Scan(&pid, &status)
	if err == pgx.ErrNoRows {
		return false, 0, ""
	}
	if err != nil {
		w.t.Fatal(err)
	}
	if pid != nil {
		activePID = int(*pid)
	}
	if status != nil {
		walStatus = *status
	}
	return true, activePID, walStatus
}

// waitFor polls cond every 50 ms until it holds, failing the test after timeout, and returns how
// long it took.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// waitDelivered waits until the verifier has received at least n deliveries.
func waitDelivered(t *testing.T, v *checker.Verifier, n int, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("%d deliveries", n), func() bool { return v.Count() >= n })
}

// withHost returns the URL u with its host and port replaced by addr.
func withHost(t *testing.T, u, addr string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p.Host = addr
	return p.String()
}

// hostOf returns host:port of the URL u.
func hostOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.Host
}

func itoa(n int) string { return strconv.Itoa(n) }
