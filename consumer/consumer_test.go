package consumer_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/wire"
)

func TestDuplicateMessageIDHandledOnce(t *testing.T) {
	e := newEnv(t, nil)
	var got calls
	c, err := consumer.New(e.pool, e.config(), func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		got.add(d)
		return recordEffect(ctx, tx, d)
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	e.waitConsuming(t)

	e.publish(t, "a", "order.created")
	e.publish(t, "a", "order.created")
	e.publish(t, "b", "order.created") // handled after both copies of a were settled
	eventually(t, 10*time.Second, "message b handled", func() bool {
		return e.count(t, "SELECT count(*) FROM effects WHERE message_id = 'b'") == 1
	})
	if n := got.of("a"); n != 1 {
		t.Errorf("handler ran %d times for message a, want 1", n)
	}
	if n := e.count(t, "SELECT count(*) FROM effects WHERE message_id = 'a'"); n != 1 {
		t.Errorf("%d effects of message a, want 1", n)
	}
	if n := e.count(t, "SELECT count(*) FROM processed_messages WHERE consumer = $1", e.queue); n != 2 {
		t.Errorf("%d processed rows, want 2", n)
	}
	eventually(t, 10*time.Second, "queue empty", func() bool { return e.readyMessages(t, e.queue) == 0 })
}

func TestSameMessageIDHandledOncePerConsumer(t *testing.T) {
	e := newEnv(t, nil)
	other := e.config()
	other.Queue = testenv.UniqueName("q_other")
	other.ConsumerName = "billing"
	t.Cleanup(func() { _, _ = e.ch.QueueDelete(other.Queue, false, false, false) })
	for _, cfg := range []consumer.Config{e.config(), other} {
		c, err := consumer.New(e.pool, cfg, recordEffect)
		if err != nil {
			t.Fatal(err)
		}
		start(t, c)
	}
	e.waitConsuming(t)
	eventually(t, 30*time.Second, "both consumers", func() bool {
		ch := openChannelQuiet(e.amqpURL)
		if ch == nil {
			return false
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive(other.Queue, true, false, false, false, nil)
		return err == nil && q.Consumers > 0
	})

	e.publish(t, "a", "order.created")
	eventually(t, 10*time.Second, "message a handled by both consumers", func() bool {
		return e.count(t, "SELECT count(*) FROM effects WHERE message_id = 'a'") == 2
	})
}

func TestHandlerErrorRetriedThenDeadLettered(t *testing.T) {
	t.Run("classic queues", func(t *testing.T) { testRetriedThenDeadLettered(t, nil, nil) })
	// The retry and dead-letter queues are quorum queues too; the retry queues' TTL and
	// dead-lettering back to the queue work as with classic ones.
	t.Run("quorum queues", func(t *testing.T) {
		testRetriedThenDeadLettered(t, nil, map[string]any{"x-queue-type": "quorum"})
	})
	t.Run("quorum queues on RabbitMQ 4.0", func(t *testing.T) {
		skipShort(t)
		r := testenv.StartRabbit(t, testenv.RabbitVersion("4.0"))
		testRetriedThenDeadLettered(t, r, map[string]any{"x-queue-type": "quorum"})
	})
}

func testRetriedThenDeadLettered(t *testing.T, r *testenv.Rabbit, queueArgs map[string]any) {
	e := newEnv(t, r)
	var got calls
	var errs errorLog
	cfg := e.config()
	cfg.QueueArgs = queueArgs
	cfg.OnError = errs.add
	c, err := consumer.New(e.pool, cfg, func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		got.add(d)
		if err := recordEffect(ctx, tx, d); err != nil {
			return err
		}
		return errors.New("boom")
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	e.waitConsuming(t)

	e.publish(t, "m1", "order.paid")
	d := e.getDeadLetter(t, e.queue+".dlq")
	if queueArgs != nil {
		e.wantQuorum(t, e.queue, e.queue+".dlq", e.queue+".retry.50ms", e.queue+".retry.100ms")
	}

	if d.MessageId != "m1" || string(d.Body) != `{"id": "m1"}` || d.Type != "order.paid" {
		t.Errorf("dead letter: id %q type %q body %s, want the original message", d.MessageId, d.Type, d.Body)
	}
	for k, want := range map[string]any{
		consumer.HeaderAttempts:   int64(3),
		consumer.HeaderError:      "boom",
		consumer.HeaderRoutingKey: "order.paid",
		consumer.HeaderExchange:   e.exchange,
		consumer.HeaderConsumer:   e.queue,
		"aggregate_id":            "42",
	} {
		if got := d.Headers[k]; got != want {
			t.Errorf("dead letter header %s = %#v, want %#v", k, got, want)
		}
	}
	ds := got.deliveries()
	if len(ds) != 3 {
		t.Fatalf("handler ran %d times, want 3", len(ds))
	}
	for i, d := range ds {
		if d.Attempt != i+1 || d.RoutingKey != "order.paid" || d.MessageID != "m1" {
			t.Errorf("call %d: attempt %d routing key %q id %q, want %d order.paid m1", i, d.Attempt, d.RoutingKey, d.MessageID, i+1)
		}
	}
	// The handler's writes and the processed row went with the failed transactions.
	if n := e.count(t, "SELECT count(*) FROM effects"); n != 0 {
		t.Errorf("%d effects left by failed attempts, want 0", n)
	}
	if n := e.count(t, "SELECT count(*) FROM processed_messages"); n != 0 {
		t.Errorf("%d processed rows left by failed attempts, want 0", n)
	}
	// OnError hears of the dead letter once the broker confirmed it, maybe after the Get above.
	var retries, deadLettered int
	eventually(t, 10*time.Second, "OnError told of the dead letter", func() bool {
		retries, deadLettered = 0, 0
		for _, err := range errs.all() {
			var me *consumer.MessageError
			if errors.As(err, &me) && me.MessageID == "m1" {
				if me.Retry {
					retries++
				}
				if me.DeadLettered {
					deadLettered++
				}
			}
		}
		return deadLettered > 0
	})
	if retries != 2 || deadLettered != 1 {
		t.Errorf("OnError got %d retries and %d dead letters, want 2 and 1", retries, deadLettered)
	}
}

func TestRetryAfterErrorAndPanicSucceeds(t *testing.T) {
	testRetrySucceeds(t, func(_ context.Context, _ pgx.Tx, attempt int) error {
		switch attempt {
		case 1:
			return errors.New("transient")
		case 2:
			panic("handler bug")
		}
		return nil
	}, "transient", "handler panic: handler bug")
}

// A handler that ends its transaction itself, or leaves it failed, is retried. The failed
// commit counts as the handler's error.
func TestHandlerThatSpoilsItsTransactionIsRetried(t *testing.T) {
	const unusable = "handler left the transaction unusable"
	testRetrySucceeds(t, func(ctx context.Context, tx pgx.Tx, attempt int) error {
		switch attempt {
		case 1:
			return tx.Rollback(ctx) // ends it
		case 2:
			_, _ = tx.Exec(ctx, "SELECT 1/0") // leaves it failed
		}
		return nil
	}, unusable, unusable)
}

// A handler that ends its transaction with its own ROLLBACK statement is retried. The
// consumer committed outside a transaction and acknowledged the message, with no writes kept.
func TestHandlerThatEndsItsTransactionByStatementIsRetried(t *testing.T) {
	const unusable = "handler left the transaction unusable"
	testRetrySucceeds(t, func(ctx context.Context, tx pgx.Tx, attempt int) error {
		if attempt < 3 {
			_, err := tx.Exec(ctx, "ROLLBACK")
			return err
		}
		return nil
	}, unusable, unusable)
}

// testRetrySucceeds runs a handler whose attempts 1 and 2 fail as fail says, and checks that
// attempt 3 is handled alone. OnError hears of the two retries, with wantErrs in them.
func testRetrySucceeds(t *testing.T, fail func(ctx context.Context, tx pgx.Tx, attempt int) error, wantErrs ...string) {
	e := newEnv(t, nil)
	var errs errorLog
	cfg := e.config()
	cfg.OnError = errs.add
	c, err := consumer.New(e.pool, cfg, func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		if err := recordEffect(ctx, tx, d); err != nil {
			return err
		}
		return fail(ctx, tx, d.Attempt)
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	e.waitConsuming(t)

	e.publish(t, "m1", "order.created")
	eventually(t, 10*time.Second, "message handled", func() bool {
		return e.count(t, "SELECT count(*) FROM processed_messages WHERE message_id = 'm1'") == 1
	})
	if n := e.count(t, "SELECT count(*) FROM effects WHERE message_id = 'm1' AND attempt = 3"); n != 1 {
		t.Errorf("%d effects of attempt 3, want 1", n)
	}
	if n := e.count(t, "SELECT count(*) FROM effects"); n != 1 {
		t.Errorf("%d effects, want 1 (failed attempts roll back)", n)
	}
	if n := e.readyMessages(t, e.queue+".dlq"); n != 0 {
		t.Errorf("%d dead letters, want 0", n)
	}
	var retries []string
	for _, err := range errs.all() {
		var me *consumer.MessageError
		if errors.As(err, &me) && me.Retry {
			retries = append(retries, me.Error())
		}
	}
	if len(retries) != len(wantErrs) {
		t.Fatalf("OnError heard of retries %q, want %d", retries, len(wantErrs))
	}
	for i, want := range wantErrs {
		if !strings.Contains(retries[i], want) {
			t.Errorf("retry %d: %q, want %q in it", i+1, retries[i], want)
		}
	}
}

func TestMissingMessageIDDeadLettered(t *testing.T) {
	e := newEnv(t, nil)
	var got calls
	c, err := consumer.New(e.pool, e.config(), func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		got.add(d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	e.waitConsuming(t)

	e.publish(t, "", "order.created")
	d := e.getDeadLetter(t, e.queue+".dlq")
	if got, want := d.Headers[consumer.HeaderError], consumer.ErrMissingMessageID.Error(); got != want {
		t.Errorf("dead letter reason %q, want %q", got, want)
	}
	if got, want := d.Headers[consumer.HeaderRoutingKey], "order.created"; got != want {
		t.Errorf("dead letter routing key %q, want %q", got, want)
	}
	if n := len(got.deliveries()); n != 0 {
		t.Errorf("handler ran %d times, want 0", n)
	}
}

func TestGracefulShutdownFinishesInFlightHandler(t *testing.T) {
	e := newEnv(t, nil)
	started := make(chan struct{}, 2)
	release := make(chan struct{})
	c, err := consumer.New(e.pool, e.config(), func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		started <- struct{}{}
		<-release
		return recordEffect(ctx, tx, d)
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, c)
	e.waitConsuming(t)

	e.publish(t, "m1", "order.created")
	e.publish(t, "m2", "order.created") // prefetched, not yet handled when the stop comes
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	time.Sleep(200 * time.Millisecond) // Run is now waiting for the handler
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) before the in-flight handler finished", err)
	default:
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}

	if n := e.count(t, "SELECT count(*) FROM effects WHERE message_id = 'm1'"); n != 1 {
		t.Errorf("%d effects of the in-flight message, want 1", n)
	}
	if n := e.count(t, "SELECT count(*) FROM effects WHERE message_id = 'm2'"); n != 0 {
		t.Errorf("%d effects of the message after it, want 0", n)
	}
	// m1 was acknowledged; m2 went back to the queue.
	eventually(t, 10*time.Second, "m2 back in the queue", func() bool { return e.readyMessages(t, e.queue) == 1 })
	d, ok, err := e.ch.Get(e.queue, true)
	if err != nil || !ok || d.MessageId != "m2" {
		t.Errorf("queue holds %q (%v, %v), want m2", d.MessageId, ok, err)
	}
}

func TestShutdownTimeoutCancelsStuckHandler(t *testing.T) {
	e := newEnv(t, nil)
	cfg := e.config()
	cfg.ShutdownTimeout = 200 * time.Millisecond
	started := make(chan struct{}, 1)
	c, err := consumer.New(e.pool, cfg, func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	e.waitConsuming(t)
	e.publish(t, "m1", "order.created")
	<-started
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "shutdown timeout") {
			t.Errorf("Run: %v, want an error about the abandoned message", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the shutdown timeout")
	}
	eventually(t, 10*time.Second, "m1 back in the queue", func() bool { return e.readyMessages(t, e.queue) == 1 })
}

// The broker dies while a handler runs: its transaction commits but the ack is lost, so the
// message comes again after the restart and must be skipped, not handled twice.
func TestReconnectsAfterBrokerRestart(t *testing.T) {
	skipShort(t)
	r := testenv.StartRabbit(t)
	testenv.RequireOwn(t, r)
	e := newEnv(t, r)
	var errs errorLog
	var got calls
	started, release := make(chan struct{}), make(chan struct{})
	cfg := e.config()
	cfg.OnError = errs.add
	c, err := consumer.New(e.pool, cfg, func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		got.add(d)
		if d.MessageID == "inflight" && got.of("inflight") == 1 {
			close(started)
			<-release
		}
		return recordEffect(ctx, tx, d)
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, c)
	e.waitConsuming(t)
	for _, id := range []string{"m1", "m2", "m3", "inflight"} {
		e.publish(t, id, "order.created")
	}
	<-started
	r.Kill(t)
	close(release)
	r.Start(t)
	// Published while the consumer may still be reconnecting: the durable queue keeps them.
	ch := openChannel(t, r.URL())
	for _, id := range []string{"m4", "m5", "m6"} {
		e.publishOn(t, ch, id, "order.created")
	}
	eventually(t, 60*time.Second, "all messages handled", func() bool {
		return e.count(t, "SELECT count(*) FROM effects") == 7
	})
	if n := e.count(t, "SELECT count(DISTINCT message_id) FROM effects"); n != 7 {
		t.Errorf("%d distinct messages handled, want 7", n)
	}
	// The in-flight message was redelivered (its ack died with the broker), skipped and
	// acknowledged: nothing returns to the queue when the consumer stops.
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := e.readyMessages(t, e.queue); n != 0 {
		t.Errorf("%d messages left in the queue, want 0", n)
	}
	if n := got.of("inflight"); n != 1 {
		t.Errorf("handler ran %d times for the in-flight message, want 1", n)
	}
	if len(errs.all()) == 0 {
		t.Error("OnError got nothing, want the lost connection")
	}
}

func TestMissingProcessedTableIsFatal(t *testing.T) {
	e := newEnv(t, nil)
	cfg := e.config()
	cfg.ProcessedTable = "no_such_table"
	c, err := consumer.New(e.pool, cfg, recordEffect)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- c.Run(ctx) }()
	e.waitConsuming(t)
	e.publish(t, "m1", "order.created")
	select {
	case err := <-done:
		if !consumer.Fatal(err) || !strings.Contains(err.Error(), "no_such_table") {
			t.Errorf("Run: %v, want a fatal error naming the table", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	eventually(t, 10*time.Second, "m1 back in the queue", func() bool { return e.readyMessages(t, e.queue) == 1 })
}

func TestProcessedTableMigrationIsIdempotentAndNameable(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	pg := testenv.SharedPostgres(t)
	conn := pg.Conn(t, pg.NewDatabase(t))
	for range 2 {
		if err := migrations.ApplyConsumer(ctx, conn); err != nil {
			t.Fatalf("ApplyConsumer: %v", err)
		}
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA app"); err != nil {
		t.Fatal(err)
	}
	table := wire.Table{Schema: "app", Name: "Handled"}
	for range 2 {
		if err := migrations.ApplyConsumerTable(ctx, conn, table); err != nil {
			t.Fatalf("ApplyConsumerTable: %v", err)
		}
	}
	for _, tbl := range []string{"public.processed_messages", `app."Handled"`} {
		if _, err := conn.Exec(ctx, "INSERT INTO "+tbl+" (message_id, consumer) VALUES ('m1', 'c')"); err != nil {
			t.Errorf("insert into %s: %v", tbl, err)
		}
	}
}

// A handler that ends its transaction leaves the connection with the consumer until it is done.
// A pool's own transaction handed it back at once; the consumer then read the state of a
// connection another goroutine could hold (a data race).
func TestHandlerThatEndsItsTransactionKeepsItsConnection(t *testing.T) {
	e := newEnv(t, nil)
	var handedBack atomic.Int32
	c, err := consumer.New(e.pool, e.config(), func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		if d.Attempt > 2 {
			return nil
		}
		end := tx.Rollback
		if d.Attempt == 2 {
			end = tx.Commit
		}
		if err := end(ctx); err != nil {
			return err
		}
		if testenv.IdleInPool(ctx, e.pool, tx.Conn()) {
			handedBack.Add(1)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	e.waitConsuming(t)
	e.publish(t, "m1", "order.created")
	eventually(t, 10*time.Second, "message handled", func() bool {
		return e.count(t, "SELECT count(*) FROM processed_messages WHERE message_id = 'm1'") == 1
	})
	if n := handedBack.Load(); n != 0 {
		t.Errorf("the pool had the handler's connection idle %d times after the handler ended its transaction", n)
	}
}
