package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/internal/testenv"
)

// The tests of partitions record each handled message in the table handled, with the handling
// process and the database's clock. A message listed in failing fails until it leaves the list.
const partitionTables = `
CREATE TABLE handled (
	id         bigserial PRIMARY KEY,
	message_id text NOT NULL,
	aggregate  text NOT NULL,
	seq        int NOT NULL,
	member     text NOT NULL,
	handled_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE failing (message_id text PRIMARY KEY)`

// partEnv is a partitioned consumer's test environment.
type partEnv struct{ *env }

// newPartEnv is newEnv on broker r (nil: the shared one), with the tables handled and failing.
func newPartEnv(tb testing.TB, r *testenv.Rabbit) *partEnv {
	tb.Helper()
	e := newEnv(tb, r)
	if _, err := e.pool.Exec(context.Background(), partitionTables); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ch := openChannelQuiet(e.amqpURL)
		if ch == nil {
			return
		}
		defer ch.Close()
		for p := range 8 {
			_, _ = ch.QueueDelete(fmt.Sprintf("%s.p%d", e.queue, p), false, false, false)
		}
		_ = ch.ExchangeDelete(e.queue+".hash", false, false)
	})
	return &partEnv{env: e}
}

// partConfig is a partitioned consumer with short leases and fast retries.
func (e *partEnv) partConfig(partitions int) consumer.Config {
	cfg := e.config()
	cfg.Bindings = []consumer.Binding{{Exchange: e.exchange, Key: "#"}}
	cfg.Partitions = partitions
	cfg.LeaseDuration = 3 * time.Second
	cfg.MaxAttempts = 2
	cfg.Prefetch = 32
	return cfg
}

// recordHandled is the handler of the partition tests: it fails the messages listed in failing
// and records the others in handled, as handled by member.
func recordHandled(member string) consumer.Handler {
	return func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		var body struct {
			Aggregate string `json:"aggregate"`
			Seq       int    `json:"seq"`
		}
		if err := json.Unmarshal(d.Body, &body); err != nil {
			return err
		}
		var fail bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM failing WHERE message_id = $1)", d.MessageID).Scan(&fail); err != nil {
			return err
		}
		if fail {
			return errors.New("listed as failing")
		}
		_, err := tx.Exec(ctx, "INSERT INTO handled (message_id, aggregate, seq, member) VALUES ($1, $2, $3, $4)",
			d.MessageID, body.Aggregate, body.Seq, member)
		return err
	}
}

// msgID names message seq of aggregate agg.
func msgID(agg string, seq int) string { return fmt.Sprintf("%s-%d", agg, seq) }

// publishAggregates publishes seqs from..to of every aggregate, interleaved, and waits for the
// confirms.
func (e *partEnv) publishAggregates(tb testing.TB, aggs []string, from, to int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var pending []*amqp.DeferredConfirmation
	for seq := from; seq <= to; seq++ {
		for _, a := range aggs {
			dc, err := e.ch.PublishWithDeferredConfirmWithContext(ctx, e.exchange, "order.created", true, false, amqp.Publishing{
				MessageId:    msgID(a, seq),
				Type:         "order.created",
				DeliveryMode: amqp.Persistent,
				Headers:      amqp.Table{"aggregate_id": a},
				Body:         []byte(fmt.Sprintf(`{"aggregate": %q, "seq": %d}`, a, seq)),
			})
			if err != nil {
				tb.Fatalf("publish: %v", err)
			}
			pending = append(pending, dc)
		}
		if len(pending) > 2000 || seq == to {
			for _, dc := range pending {
				if ok, err := dc.WaitContext(ctx); !ok || err != nil {
					tb.Fatalf("publish not confirmed: %v", err)
				}
			}
			pending = pending[:0]
		}
	}
}

func aggregates(n int) []string {
	as := make([]string, n)
	for i := range as {
		as[i] = "agg" + strconv.Itoa(i)
	}
	return as
}

// checkHandled fails the test unless every message of seqs 1..n of aggs was handled exactly
// once, each aggregate's in order, less those in skipped.
func (e *partEnv) checkHandled(tb testing.TB, aggs []string, n int, skipped map[string]bool) {
	tb.Helper()
	rows, err := e.pool.Query(context.Background(), "SELECT aggregate, seq FROM handled ORDER BY id")
	if err != nil {
		tb.Fatal(err)
	}
	last := map[string]int{}
	count := map[string]int{}
	problems := 0
	for rows.Next() {
		var a string
		var seq int
		if err := rows.Scan(&a, &seq); err != nil {
			tb.Fatal(err)
		}
		count[msgID(a, seq)]++
		if seq <= last[a] && problems < 10 {
			tb.Errorf("aggregate %s: seq %d handled after seq %d", a, seq, last[a])
			problems++
		}
		last[a] = seq
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	for _, a := range aggs {
		for seq := 1; seq <= n; seq++ {
			id := msgID(a, seq)
			want := 1
			if skipped[id] {
				want = 0
			}
			if count[id] != want && problems < 20 {
				tb.Errorf("message %s handled %d times, want %d", id, count[id], want)
				problems++
			}
		}
	}
}

// waitHandled waits until n messages were handled. It counts less often as n grows, so that
// the counting does not slow the handling it measures.
func (e *partEnv) waitHandled(tb testing.TB, n int, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for e.count(tb, "SELECT count(DISTINCT message_id) FROM handled") < n {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %d messages handled", timeout, n)
		}
		time.Sleep(max(20*time.Millisecond, time.Duration(n)*50*time.Microsecond))
	}
}

// childEnv names what a child consumer process runs: the test binary again, with these variables.
const (
	envChild       = "WALBOX_TEST_PARTITION_CHILD"
	envChildConfig = "WALBOX_TEST_PARTITION_CONFIG"
)

// childConfig is what the parent passes a child consumer process: the settings of partConfig
// that the tests change.
type childConfig struct {
	DatabaseURL, AMQPURL, Queue, Exchange string
	Partitions, MaxAttempts               int
	Lease                                 time.Duration
}

func (cc childConfig) config() consumer.Config {
	return consumer.Config{
		AMQPURL:          cc.AMQPURL,
		Queue:            cc.Queue,
		Bindings:         []consumer.Binding{{Exchange: cc.Exchange, Key: "#"}},
		Partitions:       cc.Partitions,
		LeaseDuration:    cc.Lease,
		MaxAttempts:      cc.MaxAttempts,
		Prefetch:         32,
		RetryBackoff:     50 * time.Millisecond,
		RetryBackoffMax:  100 * time.Millisecond,
		ReconnectBackoff: 100 * time.Millisecond,
	}
}

// runChildIfAsked runs a child consumer when the test binary was started as one. It returns
// false in the test binary itself.
func runChildIfAsked() bool {
	name := os.Getenv(envChild)
	if name == "" {
		return false
	}
	var cc childConfig
	if err := json.Unmarshal([]byte(os.Getenv(envChildConfig)), &cc); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	pool, err := pgxpool.New(ctx, cc.DatabaseURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	cfg := cc.config()
	cfg.OnError = func(err error) { fmt.Fprintln(os.Stderr, "child", name+":", err) }
	c, err := consumer.New(pool, cfg, recordHandled(name))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

// child is a consumer process of the test binary.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// startChild starts a consumer process named name with cfg's settings.
func (e *partEnv) startChild(tb testing.TB, name string, cfg consumer.Config) *child {
	tb.Helper()
	raw, err := json.Marshal(childConfig{DatabaseURL: e.dbURL, AMQPURL: cfg.AMQPURL, Queue: cfg.Queue,
		Exchange: e.exchange, Partitions: cfg.Partitions, MaxAttempts: cfg.MaxAttempts, Lease: cfg.LeaseDuration})
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+name, envChildConfig+"="+string(raw))
	cmd.Stderr = testWriter{tb, name}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.done) }()
	tb.Cleanup(func() { c.kill() })
	return c
}

// kill kills the process at once (SIGKILL) and waits for it.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// testWriter sends a child's output to the test log.
type testWriter struct {
	tb   testing.TB
	name string
}

var logMu sync.Mutex

func (w testWriter) Write(p []byte) (int, error) {
	logMu.Lock()
	defer logMu.Unlock()
	w.tb.Logf("%s: %s", w.name, p)
	return len(p), nil
}
