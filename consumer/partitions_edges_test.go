package consumer_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/internal/testenv"
)

// A message that Skip discarded stays discarded when a copy of it comes: the relay delivers at
// least once. Handling the copy would also put it after its aggregate's later messages.
func TestSkippedMessageStaysSkippedWhenDeliveredAgain(t *testing.T) {
	e := newPartEnv(t, nil)
	cfg := e.partConfig(1)
	e.fail(t, msgID("agg0", 1))
	c := e.runOne(t, e.pool, cfg)
	aggs := aggregates(1)
	e.publishAggregates(t, aggs, 1, 2)
	e.waitFailed(t, "agg0")
	if err := c.Skip(context.Background(), "agg0"); err != nil {
		t.Fatal(err)
	}
	e.waitHandled(t, 1, time.Minute)
	e.unfail(t, msgID("agg0", 1)) // the copy would be handled now
	e.publishAggregates(t, aggs, 1, 1)
	e.publishAggregates(t, aggs, 3, 3) // one partition: handled after the copy
	eventually(t, time.Minute, "agg0-3 handled", func() bool {
		return e.count(t, "SELECT count(*) FROM handled WHERE message_id = 'agg0-3'") == 1
	})
	e.checkHandled(t, aggs, 3, map[string]bool{"agg0-1": true})
}

// A restart with another partition count stops Run before it declares anything. With fewer
// partitions the queues above the count stay bound, and their messages would wait unconsumed.
// With more, aggregates move to new queues while their older messages wait in the old ones.
func TestChangedPartitionCountStopsRun(t *testing.T) {
	e := newPartEnv(t, nil)
	c, err := consumer.New(e.pool, e.partConfig(4), recordHandled("c"))
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, c)
	e.waitLeases(t, e.partConfig(4), 4, 1)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 6} {
		c, err := consumer.New(e.pool, e.partConfig(n), recordHandled("c"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = c.Run(ctx)
		cancel()
		if !errors.Is(err, consumer.ErrPartitionsChanged) || !consumer.Fatal(err) {
			t.Errorf("Run with %d partitions after 4: %v; want the fatal ErrPartitionsChanged", n, err)
		}
	}
	ch := openChannelQuiet(e.amqpURL)
	if ch == nil {
		t.Fatal("no channel")
	}
	defer ch.Close()
	if _, err := ch.QueueDeclarePassive(e.queue+".p4", true, false, false, false, nil); err == nil {
		t.Errorf("queue %s.p4 declared: the hash ring changed", e.queue)
	}
}

// Copies of held messages, as a redelivery after a crash between the hold and the ack brings
// them, join the hold once. Messages of the aggregate published while its release drains the
// hold come after the held ones. Each is handled once, in order.
func TestCopiesAndNewMessagesOfAHeldAggregateKeepItsOrder(t *testing.T) {
	e := newPartEnv(t, nil)
	cfg := e.partConfig(1)
	e.fail(t, msgID("agg0", 1))
	c := e.runOne(t, e.pool, cfg)
	aggs := aggregates(1)
	e.publishAggregates(t, aggs, 1, 50)
	e.waitFailed(t, "agg0")
	eventually(t, time.Minute, "50 messages held", func() bool {
		n, err := c.HeldMessages(context.Background())
		return err == nil && n == 50
	})
	e.publishAggregates(t, aggs, 1, 50) // a copy of each
	e.publishAggregates(t, aggs, 51, 51)
	eventually(t, time.Minute, "51 messages held", func() bool {
		n, err := c.HeldMessages(context.Background())
		return err == nil && n == 51
	})
	e.unfail(t, msgID("agg0", 1))
	released := make(chan error, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		released <- c.Release(context.Background(), "agg0")
	}()
	for seq := 52; seq <= 150; seq++ {
		e.publishAggregates(t, aggs, seq, seq)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	e.waitHandled(t, 150, time.Minute)
	e.checkHandled(t, aggs, 150, nil)
}

// On RabbitMQ 4.0 a quorum queue drops a message returned more than 20 times: its default
// delivery limit. A partition's session ends after each database error, and its prefetched
// messages go back to the queue. A database down for a while must not drop them.
func TestPartitionMessagesOutliveManyReturnsOnRabbitMQ40(t *testing.T) {
	skipShort(t)
	r := testenv.StartRabbit(t, testenv.RabbitVersion("4.0"), testenv.HashPlugin())
	e := newPartEnv(t, r)
	if _, err := e.pool.Exec(context.Background(), refuseProcessedAs("P0001")); err != nil {
		t.Fatal(err)
	}
	cfg := e.partConfig(1)
	cfg.ReconnectBackoff, cfg.ReconnectBackoffMax = 10*time.Millisecond, 20*time.Millisecond
	e.runOne(t, e.pool, cfg)
	aggs := aggregates(3)
	e.publishAggregates(t, aggs, 1, 1)
	refused, deadline := 0, time.Now().Add(time.Minute)
	for refused < 25 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		refused = e.count(t, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM refusals")
	}
	if refused < 25 {
		t.Fatalf("the consumer was given the messages %d times in a minute, then never again: the queue dropped them", refused)
	}
	if _, err := e.pool.Exec(context.Background(), "DELETE FROM refuse"); err != nil {
		t.Fatal(err)
	}
	e.waitHandled(t, 3, time.Minute)
	e.checkHandled(t, aggs, 1, nil)
}

// cutProxy forwards TCP connections to target until cut, which closes them all and refuses
// new ones.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startCutProxy(tb testing.TB, target string) *cutProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	tb.Cleanup(p.cut)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// A process that cannot reach the broker while its database works gives up its partitions and
// its membership. The other process takes them, instead of waiting for the broker to come back.
func TestPartitionsOfAProcessCutOffFromTheBrokerMove(t *testing.T) {
	e := newPartEnv(t, nil)
	cfg := e.partConfig(2)
	u, err := url.Parse(cfg.AMQPURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startCutProxy(t, u.Host)
	cut := cfg
	u.Host = proxy.ln.Addr().String()
	cut.AMQPURL = u.String()
	e.startConsumer(t, cut, "a")
	e.waitLeases(t, cfg, 2, 1)
	e.startConsumer(t, cfg, "b")
	e.waitLeases(t, cfg, 2, 2)
	proxy.cut()
	aggs := aggregates(20)
	e.publishAggregates(t, aggs, 1, 5)
	e.waitHandled(t, 20*5, time.Minute)
	e.checkHandled(t, aggs, 5, nil)
}

// A partitioned consumer's handler that ends its transaction leaves the connection with the
// consumer too: when it handles a delivery, and a held message. The pool has one connection.
// So a failed held message must give it back before its failure is recorded.
func TestPartitionHandlerThatEndsItsTransactionKeepsItsConnection(t *testing.T) {
	e := newPartEnv(t, nil)
	cfg := e.partConfig(1)
	cfg.MaxAttempts = 3
	pcfg, err := pgxpool.ParseConfig(e.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var handedBack atomic.Int32
	c, err := consumer.New(pool, cfg, func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		if d.Attempt > 2 {
			return recordEffect(ctx, tx, d)
		}
		// Attempt 1 is the delivery's, attempt 2 the held message's.
		if err := tx.Rollback(ctx); err != nil {
			return err
		}
		if testenv.IdleInPool(ctx, pool, tx.Conn()) {
			handedBack.Add(1)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	e.waitLeases(t, cfg, 1, 1)
	e.publishAggregates(t, aggregates(1), 1, 1)
	eventually(t, time.Minute, "the held message handled on its third attempt", func() bool {
		return e.count(t, "SELECT count(*) FROM effects WHERE message_id = 'agg0-1' AND attempt = 3") == 1
	})
	if n := handedBack.Load(); n != 0 {
		t.Errorf("the pool had the handler's connection idle %d times after the handler ended its transaction", n)
	}
}

// A held message whose handler commits its transaction itself is handled: it left the hold.
// Its failure is not charged to the message behind it, which would then fail unhandled.
func TestHeldMessageThatItsHandlerCommitsLeavesTheNextOneItsAttempts(t *testing.T) {
	e := newPartEnv(t, nil)
	cfg := e.partConfig(1)
	cfg.MaxAttempts = 1
	var released atomic.Bool
	c, err := consumer.New(e.pool, cfg, func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		if err := recordEffect(ctx, tx, d); err != nil {
			return err
		}
		if d.MessageID != msgID("agg0", 1) {
			return nil
		}
		if !released.Load() {
			return errors.New("fails until released")
		}
		return tx.Commit(ctx) // ends it, the message handled
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	e.waitLeases(t, cfg, 1, 1)
	aggs := aggregates(1)
	e.publishAggregates(t, aggs, 1, 1)
	e.waitFailed(t, "agg0")
	e.publishAggregates(t, aggs, 2, 2)
	eventually(t, time.Minute, "agg0-2 held", func() bool {
		return e.count(t, "SELECT count(*) FROM walbox_held_messages WHERE message_id = 'agg0-2'") == 1
	})
	released.Store(true)
	if err := c.Release(context.Background(), "agg0"); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "agg0-2 handled, or its hold failed", func() bool {
		return e.count(t, "SELECT count(*) FROM effects WHERE message_id = 'agg0-2'") == 1 ||
			e.count(t, "SELECT count(*) FROM walbox_consumer_holds WHERE aggregate_id = 'agg0' AND failed") == 1
	})
	if n := e.count(t, "SELECT count(*) FROM walbox_consumer_holds WHERE aggregate_id = 'agg0' AND failed"); n != 0 {
		t.Error("agg0's hold failed for good after its first message was handled; agg0-2 never ran")
	}
	if n := e.count(t, "SELECT count(*) FROM effects WHERE message_id = 'agg0-1' AND attempt = 1"); n != 1 {
		t.Errorf("agg0-1 has %d committed effects, want 1", n)
	}
}
