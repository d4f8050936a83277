package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/wire"
)

// Three consumers of one name, each with its own connections, share six partitions. One
// leaves half way and another joins: each aggregate's messages are still handled once each,
// in the order they were published.
func TestPartitionsKeepEachAggregatesOrderAcrossConsumers(t *testing.T) {
	e := newPartEnv(t, nil)
	cfg := e.partConfig(6)
	var stops []func() error
	for _, name := range []string{"c1", "c2", "c3"} {
		stops = append(stops, e.startConsumer(t, cfg, name))
	}
	e.waitLeases(t, cfg, 6, 3)
	aggs := aggregates(40)
	e.publishAggregates(t, aggs, 1, 25)
	e.waitHandled(t, 40*10, time.Minute)
	if err := stops[0](); err != nil {
		t.Errorf("stop c1: %v", err)
	}
	e.startConsumer(t, cfg, "c4")
	e.publishAggregates(t, aggs, 26, 50)
	e.waitHandled(t, 40*50, 2*time.Minute)
	e.checkHandled(t, aggs, 50, nil)
	if n := e.count(t, "SELECT count(DISTINCT member) FROM handled"); n < 3 {
		t.Errorf("%d consumers handled messages, want the work spread over at least 3", n)
	}
}

// A consumer process killed with SIGKILL keeps its partitions until their leases expire: the
// other takes them over only then, and no message is handled twice or out of order.
func TestPartitionLeaseTakenOverOnlyAfterExpiry(t *testing.T) {
	e := newPartEnv(t, nil)
	cfg := e.partConfig(4)
	a, b := e.startTwo(t, cfg)
	aggs := aggregates(20)
	e.publishAggregates(t, aggs, 1, 20)
	e.waitHandled(t, 20*5, time.Minute)
	a.kill()
	expiry := e.leaseExpiry(t, cfg, a)
	e.publishAggregates(t, aggs, 21, 40)
	e.waitHandled(t, 20*40, 2*time.Minute)
	e.checkHandled(t, aggs, 40, nil)
	// Every aggregate a handled before the kill went to b only after a's last lease ended.
	early := e.count(t, `SELECT count(*) FROM handled h WHERE h.member = 'b' AND h.handled_at < $1
		AND EXISTS (SELECT 1 FROM handled x WHERE x.aggregate = h.aggregate AND x.member = 'a')`, expiry)
	if early != 0 {
		t.Errorf("%d messages of a's aggregates handled by b before a's lease expired at %s", early, expiry)
	}
	if n := e.count(t, "SELECT count(*) FROM handled WHERE member = 'a' AND aggregate IN (SELECT aggregate FROM handled WHERE member = 'b')"); n == 0 {
		t.Error("b took over none of a's aggregates")
	}
	b.kill()
}

// A consumer process frozen past its lease (SIGSTOP) loses its partition to the standby. Once
// thawed it handles nothing more: it stops at its deadline, and its database writes are fenced
// by the lease. Single active consumer alone would let it handle what it had prefetched. With
// one partition the thawed process stays a standby, so whatever it handled after its lease
// ended would be a fault.
func TestFrozenConsumerStopsAfterItsLease(t *testing.T) {
	e := newPartEnv(t, nil)
	cfg := e.partConfig(1)
	a := e.startChild(t, "a", cfg)
	e.waitLeases(t, cfg, 1, 1)
	b := e.startChild(t, "b", cfg)
	eventually(t, time.Minute, "b a member", func() bool {
		return e.count(t, "SELECT count(*) FROM walbox_consumer_members WHERE expires_at > clock_timestamp()") == 2
	})
	aggs := aggregates(20)
	e.publishAggregates(t, aggs, 1, 10)
	e.waitHandled(t, 20*10, time.Minute)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	expiry := e.leaseExpiry(t, cfg, a)
	e.publishAggregates(t, aggs, 11, 20) // a, still the active consumer, gets them ahead
	eventually(t, time.Minute, "b holding the partition", func() bool {
		return !e.leaseExpiry(t, cfg, b).IsZero()
	})
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	e.waitHandled(t, 20*20, 2*time.Minute)
	e.checkHandled(t, aggs, 20, nil)
	if n := e.count(t, "SELECT count(*) FROM handled WHERE member = 'a' AND handled_at > $1", expiry); n != 0 {
		t.Errorf("a handled %d messages after its lease ended", n)
	}
	a.kill()
	b.kill()
}

// A message that fails for good holds back its aggregate's later messages, not the partition's
// other aggregates. Release lets the held ones through, in order, before new ones.
func TestFailureHoldsOnlyItsAggregateUntilReleased(t *testing.T) {
	e := newPartEnv(t, nil)
	cfg := e.partConfig(1) // one partition: the held aggregate shares it with the others
	var errs errorLog
	cfg.OnError = func(err error) { t.Log(err); errs.add(err) }
	e.fail(t, msgID("agg0", 2))
	c := e.runOne(t, e.pool, cfg)
	aggs := aggregates(3)
	e.publishAggregates(t, aggs, 1, 5)
	e.waitHandled(t, 3*5-4, time.Minute)
	e.waitFailed(t, "agg0")
	if held, err := c.HeldMessages(context.Background()); err != nil || held != 4 {
		t.Errorf("HeldMessages = %d, %v; want 4 (agg0-2 to agg0-5)", held, err)
	}
	if n := e.count(t, "SELECT count(*) FROM handled WHERE aggregate = 'agg0'"); n != 1 {
		t.Errorf("%d messages of agg0 handled, want 1: those after the failed one are held", n)
	}
	var held bool
	for _, err := range errs.all() {
		var me *consumer.MessageError
		held = held || errors.As(err, &me) && me.Held && me.MessageID == "agg0-2"
	}
	if !held {
		t.Errorf("OnError heard of no held message; got %v", errs.all())
	}
	// New messages of agg0 join the hold; agg0-2 is released once it no longer fails.
	e.publishAggregates(t, aggs, 6, 6)
	e.waitHandled(t, 3*6-5, time.Minute)
	e.unfail(t, msgID("agg0", 2))
	if err := c.Release(context.Background(), "agg0"); err != nil {
		t.Fatal(err)
	}
	e.waitHandled(t, 3*6, time.Minute)
	e.checkHandled(t, aggs, 6, nil)
	if held, err := c.HeldMessages(context.Background()); err != nil || held != 0 {
		t.Errorf("HeldMessages = %d, %v after release; want 0", held, err)
	}
	if err := c.Release(context.Background(), "agg0"); !errors.Is(err, consumer.ErrNotHeld) {
		t.Errorf("second Release: %v, want ErrNotHeld", err)
	}
}

// Skip discards the failed message; the aggregate's others follow, and the SQL function does
// the same as the method.
func TestSkipDiscardsTheFailedMessage(t *testing.T) {
	e := newPartEnv(t, nil)
	cfg := e.partConfig(2)
	e.fail(t, msgID("agg1", 1))
	e.runOne(t, e.pool, cfg)
	aggs := aggregates(2)
	e.publishAggregates(t, aggs, 1, 3)
	e.waitFailed(t, "agg1")
	var found bool
	if err := e.pool.QueryRow(context.Background(), "SELECT public.walbox_release($1, 'agg1', true)", cfg.Queue).Scan(&found); err != nil || !found {
		t.Fatalf("walbox_release: %v, %v", found, err)
	}
	e.waitHandled(t, 5, time.Minute)
	e.checkHandled(t, aggs, 3, map[string]bool{"agg1-1": true})
}

// Without the broker's consistent-hash plugin, Run stops at once and names the fix.
func TestPartitionsWithoutThePluginNameTheFix(t *testing.T) {
	skipShort(t)
	r := testenv.StartRabbitConf(t, "") // a node without the plugin; an external one has it
	e := newPartEnv(t, nil)
	cfg := e.partConfig(2)
	cfg.AMQPURL = r.URL()
	c, err := consumer.New(e.pool, cfg, recordHandled("c"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = c.Run(ctx)
	if !errors.Is(err, consumer.ErrHashExchangeMissing) || !consumer.Fatal(err) {
		t.Fatalf("Run: %v; want the fatal ErrHashExchangeMissing", err)
	}
	if !strings.Contains(err.Error(), "rabbitmq-plugins enable rabbitmq_consistent_hash_exchange") {
		t.Errorf("error %q does not name the fix", err)
	}
}

// A database without the partition tables stops Run at once, naming the migration.
func TestPartitionsWithoutTheirTablesNameTheMigration(t *testing.T) {
	e := newPartEnv(t, nil)
	if _, err := e.pool.Exec(context.Background(), "DROP TABLE walbox_consumer_members"); err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(e.pool, e.partConfig(2), recordHandled("c"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = c.Run(ctx)
	if !consumer.Fatal(err) || !strings.Contains(err.Error(), "migrations.ApplyConsumer") {
		t.Fatalf("Run: %v; want a fatal error naming migrations.ApplyConsumer", err)
	}
}

// startConsumer runs a consumer of cfg in this process, on a pool of its own.
func (e *partEnv) startConsumer(tb testing.TB, cfg consumer.Config, name string) (stop func() error) {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), e.dbURL)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	c, err := consumer.New(pool, cfg, recordHandled(name))
	if err != nil {
		tb.Fatal(err)
	}
	return start(tb, c)
}

// runOne runs a consumer of cfg with the handler recordHandled("c") on pool, until the test
// ends. It returns once the partitions are leased.
func (e *partEnv) runOne(tb testing.TB, pool *pgxpool.Pool, cfg consumer.Config) *consumer.Consumer {
	tb.Helper()
	c, err := consumer.New(pool, cfg, recordHandled("c"))
	if err != nil {
		tb.Fatal(err)
	}
	start(tb, c)
	e.waitLeases(tb, cfg, cfg.Partitions, 1)
	return c
}

// waitFailed waits until the first held message of agg failed for good.
func (e *partEnv) waitFailed(tb testing.TB, agg string) {
	tb.Helper()
	eventually(tb, 30*time.Second, agg+"'s held message failed for good", func() bool {
		return e.count(tb, "SELECT count(*) FROM walbox_consumer_holds WHERE aggregate_id = $1 AND failed", agg) == 1
	})
}

// startTwo starts consumer processes a, then b, each once the partitions are leased.
func (e *partEnv) startTwo(tb testing.TB, cfg consumer.Config) (a, b *child) {
	tb.Helper()
	a = e.startChild(tb, "a", cfg)
	e.waitLeases(tb, cfg, cfg.Partitions, 1)
	b = e.startChild(tb, "b", cfg)
	e.waitLeases(tb, cfg, cfg.Partitions, 2)
	return a, b
}

// leaseExpiry is when the last lease of process c ends, as the database records it; zero if it
// holds none.
func (e *partEnv) leaseExpiry(tb testing.TB, cfg consumer.Config, c *child) time.Time {
	tb.Helper()
	var expiry *time.Time
	if err := e.pool.QueryRow(context.Background(), `SELECT max(expires_at) FROM walbox_consumer_leases
		WHERE consumer = $1 AND holder LIKE '%/' || $2 || '/%'`, cfg.Queue, strconv.Itoa(c.cmd.Process.Pid)).Scan(&expiry); err != nil {
		tb.Fatal(err)
	}
	if expiry == nil {
		return time.Time{}
	}
	return *expiry
}

// waitLeases waits until the partitions are leased, to as many holders.
func (e *partEnv) waitLeases(tb testing.TB, cfg consumer.Config, partitions, holders int) {
	tb.Helper()
	eventually(tb, time.Minute, "partitions leased", func() bool {
		var n, h int
		err := e.pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT holder) FROM walbox_consumer_leases
			WHERE consumer = $1 AND expires_at > clock_timestamp()`, cfg.Queue).Scan(&n, &h)
		return err == nil && n == partitions && h == holders
	})
}

func (e *partEnv) fail(tb testing.TB, id string) {
	tb.Helper()
	if _, err := e.pool.Exec(context.Background(), "INSERT INTO failing VALUES ($1)", id); err != nil {
		tb.Fatal(err)
	}
}

func (e *partEnv) unfail(tb testing.TB, id string) {
	tb.Helper()
	if _, err := e.pool.Exec(context.Background(), "DELETE FROM failing WHERE message_id = $1", id); err != nil {
		tb.Fatal(err)
	}
}

// A consumer role with only the grants docs/outbox.md lists runs partitions, holds and
// releases.
func TestPartitionsRunAsALeastPrivilegedRole(t *testing.T) {
	e := newPartEnv(t, nil)
	role := testenv.UniqueName("consumer")
	ident := pgx.Identifier{role}.Sanitize()
	for _, sql := range []string{
		// A password: the compose profile's server asks for one over the network.
		"CREATE ROLE " + ident + " LOGIN PASSWORD '" + role + "'",
		"GRANT INSERT ON processed_messages TO " + ident,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON walbox_consumer_members, walbox_consumer_leases," +
			" walbox_consumer_holds, walbox_held_messages TO " + ident,
		"REVOKE EXECUTE ON FUNCTION walbox_release(text, text, boolean) FROM PUBLIC",
		"GRANT EXECUTE ON FUNCTION walbox_release(text, text, boolean) TO " + ident,
		"GRANT SELECT ON failing TO " + ident,
		"GRANT INSERT ON handled TO " + ident,
		"GRANT USAGE ON SEQUENCE handled_id_seq TO " + ident,
	} {
		if _, err := e.pool.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() {
		_, _ = e.pool.Exec(context.Background(), "DROP OWNED BY "+ident)
		_, _ = e.pool.Exec(context.Background(), "DROP ROLE "+ident)
	})
	u, err := url.Parse(e.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, role)
	pool, err := pgxpool.New(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	cfg := e.partConfig(2)
	cfg.OnError = func(err error) { t.Log(err) }
	e.fail(t, msgID("agg0", 1))
	c := e.runOne(t, pool, cfg)
	aggs := aggregates(4)
	e.publishAggregates(t, aggs, 1, 3)
	e.waitFailed(t, "agg0")
	e.unfail(t, msgID("agg0", 1))
	if err := c.Release(context.Background(), "agg0"); err != nil {
		t.Fatal(err)
	}
	e.waitHandled(t, 4*3, time.Minute)
	e.checkHandled(t, aggs, 3, nil)
}

// On a three-node cluster the partitions are quorum queues. Two consumers, each connected to
// another node, go on while the third node is killed, each aggregate in order.
func TestPartitionsOnAClusterOutliveANode(t *testing.T) {
	skipShort(t)
	cl := testenv.SharedCluster(t)
	defer cl.StartAll(t)
	e := newPartEnv(t, cl.Node(0))
	cfg := e.partConfig(4)
	e.startConsumer(t, cfg, "c0")
	cfg.AMQPURL = cl.Node(1).URL()
	e.startConsumer(t, cfg, "c1")
	e.waitLeases(t, cfg, 4, 2)
	var queues []string
	for p := range 4 {
		queues = append(queues, fmt.Sprintf("%s.p%d", cfg.Queue, p))
	}
	e.wantQuorum(t, queues...)
	aggs := aggregates(20)
	e.publishAggregates(t, aggs, 1, 10)
	e.waitHandled(t, 20*10, time.Minute)
	cl.Node(2).Kill(t)
	e.publishAggregates(t, aggs, 11, 20)
	e.waitHandled(t, 20*20, 2*time.Minute)
	e.checkHandled(t, aggs, 20, nil)
}

// Two databases on one broker: each has its own queue, bound to one exchange, and its own
// leases, under the same consumer name. Each handles every message once, in order.
func TestPartitionsOfTwoDatabasesOnOneBroker(t *testing.T) {
	e1, e2 := newPartEnv(t, nil), newPartEnv(t, nil)
	e2.exchange = e1.exchange
	for _, e := range []*partEnv{e1, e2} {
		cfg := e.partConfig(2)
		cfg.ConsumerName = "notifier"
		e.startConsumer(t, cfg, "c")
		eventually(t, time.Minute, "partitions leased", func() bool {
			return e.count(t, "SELECT count(*) FROM walbox_consumer_leases WHERE consumer = 'notifier' AND expires_at > clock_timestamp()") == 2
		})
	}
	aggs := aggregates(10)
	e1.publishAggregates(t, aggs, 1, 10)
	for _, e := range []*partEnv{e1, e2} {
		e.waitHandled(t, 10*10, time.Minute)
		e.checkHandled(t, aggs, 10, nil)
	}
}

// Each aggregate goes to one partition, and still to the same one after a consumer declared
// the topology again, as every connect does.
func TestPartitionOfAnAggregateOutlivesARedeclare(t *testing.T) {
	e := newPartEnv(t, nil)
	cfg := e.partConfig(4)
	aggs := aggregates(100)
	var before map[string]string
	for round := range 2 {
		stop := e.startConsumer(t, cfg, "c")
		e.waitLeases(t, cfg, 4, 1)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		e.publishAggregates(t, aggs, 1, 2)
		got := e.routes(t, cfg, len(aggs)*2)
		queues := map[string]bool{}
		for _, q := range got {
			queues[q] = true
		}
		if len(got) != len(aggs) || len(queues) != 4 {
			t.Fatalf("round %d: %d aggregates routed to %d queues, want %d to 4", round, len(got), len(queues), len(aggs))
		}
		for a, q := range before {
			if got[a] != q {
				t.Errorf("aggregate %s moved from %s to %s after the topology was declared again", a, q, got[a])
			}
		}
		before = got
	}
}

// routes consumes n messages from cfg's partitions and maps each message's aggregate to its
// queue. Basic.get is refused with single active consumer.
func (e *partEnv) routes(t *testing.T, cfg consumer.Config, n int) map[string]string {
	t.Helper()
	ch := openChannel(t, e.amqpURL)
	type routed struct{ aggregate, queue string }
	all := make(chan routed)
	for p := range cfg.Partitions {
		q := fmt.Sprintf("%s.p%d", cfg.Queue, p)
		ds, err := ch.Consume(q, "", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for d := range ds {
				a, _ := d.Headers["aggregate_id"].(string)
				all <- routed{a, q}
			}
		}()
	}
	got := map[string]string{}
	for range n {
		select {
		case r := <-all:
			if got[r.aggregate] != "" && got[r.aggregate] != r.queue {
				t.Errorf("aggregate %s in %s and %s", r.aggregate, got[r.aggregate], r.queue)
			}
			got[r.aggregate] = r.queue
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d messages consumed", len(got), n)
		}
	}
	_ = ch.Close()
	return got
}

// A partitioned worker acknowledges walbox's canary unhandled, and hands the handler a producer's
// row of the canary's event type: only walbox's header makes a canary.
func TestPartitionsPassTheCanaryAndHandleARowOfItsType(t *testing.T) {
	e := newPartEnv(t, nil)
	cfg := e.partConfig(2)
	e.startConsumer(t, cfg, "c1")
	e.waitLeases(t, cfg, 2, 1)
	e.publishHeaders(t, "canary-1", wire.CanaryEventType, amqp.Table{wire.HeaderCanary: true, "aggregate_id": "a"})
	e.publishHeaders(t, "user-row", wire.CanaryEventType, amqp.Table{"aggregate_id": "a"})
	e.publishAggregates(t, []string{"b"}, 1, 1)
	e.waitHandled(t, 2, time.Minute)
	eventually(t, 20*time.Second, "partition queues empty", func() bool {
		return e.readyMessages(t, e.queue+".p0") == 0 && e.readyMessages(t, e.queue+".p1") == 0
	})
	if n := e.count(t, "SELECT count(*) FROM handled WHERE message_id = 'user-row'"); n != 1 {
		t.Errorf("the producer's row of type %s was handled %d times, want once", wire.CanaryEventType, n)
	}
	if n := e.count(t, "SELECT count(*) FROM handled WHERE message_id = 'canary-1'"); n != 0 {
		t.Errorf("the canary was handled %d times, want never", n)
	}
}
