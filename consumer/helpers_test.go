package consumer_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/wire"
)

func TestMain(m *testing.M) {
	if runChildIfAsked() {
		return
	}
	os.Exit(testenv.Main(m))
}

// env is one test's database, broker, queue and exchange.
type env struct {
	pool     *pgxpool.Pool
	dbURL    string
	amqpURL  string
	queue    string
	exchange string
	ch       *amqp.Channel // for the test's own publishing and inspection
}

// skipShort skips an integration test under -short.
func skipShort(tb testing.TB) {
	tb.Helper()
	if testenv.Short() {
		tb.Skip("integration test: needs PostgreSQL and RabbitMQ")
	}
}

// newEnv creates a database with the processed-messages table and an effects table for the
// handlers' writes, and names a queue and exchange of the test's own on broker r (nil: the
// shared one).
func newEnv(tb testing.TB, r *testenv.Rabbit) *env {
	tb.Helper()
	skipShort(tb)
	if r == nil {
		r = testenv.SharedRabbit(tb)
	}
	amqpURL := r.URL()
	ctx := context.Background()
	pg := testenv.SharedPostgres(tb)
	dbURL := pg.NewDatabase(tb)
	conn := pg.Conn(tb, dbURL)
	if err := migrations.ApplyConsumer(ctx, conn); err != nil {
		tb.Fatalf("apply consumer migrations: %v", err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE effects (message_id text NOT NULL, attempt int NOT NULL)"); err != nil {
		tb.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	e := &env{pool: pool, dbURL: dbURL, amqpURL: amqpURL, queue: testenv.UniqueName("q"), exchange: testenv.UniqueName("ex")}
	e.ch = openChannel(tb, amqpURL)
	// As walbox declares it: with its alternate exchange.
	ae := wire.DefaultAlternateExchange(e.exchange)
	if err := e.ch.ExchangeDeclare(ae, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		tb.Fatalf("declare exchange: %v", err)
	}
	if err := e.ch.ExchangeDeclare(e.exchange, amqp.ExchangeTopic, true, false, false, false,
		amqp.Table{"alternate-exchange": ae}); err != nil {
		tb.Fatalf("declare exchange: %v", err)
	}
	tb.Cleanup(func() { e.deleteQueues(tb) })
	return e
}

func openChannel(tb testing.TB, url string) *amqp.Channel {
	tb.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		tb.Fatalf("dial broker: %v", err)
	}
	tb.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatalf("open channel: %v", err)
	}
	if err := ch.Confirm(false); err != nil {
		tb.Fatalf("confirm mode: %v", err)
	}
	return ch
}

// deleteQueues removes the queues the consumer declared, on a connection of its own (the
// test's may be gone with a restarted broker).
func (e *env) deleteQueues(tb testing.TB) {
	conn, err := amqp.Dial(e.amqpURL)
	if err != nil {
		return // the broker is gone with its queues
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	for _, q := range []string{e.queue, e.queue + ".dlq", e.queue + ".retry.50ms", e.queue + ".retry.100ms"} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	_ = ch.ExchangeDelete(e.exchange, false, false)
}

// config is the consumer configuration the tests start from: fast retries and reconnects.
func (e *env) config() consumer.Config {
	return consumer.Config{
		AMQPURL:          e.amqpURL,
		Queue:            e.queue,
		Bindings:         []consumer.Binding{{Exchange: e.exchange, Key: "order.*"}},
		MaxAttempts:      3,
		RetryBackoff:     50 * time.Millisecond,
		RetryBackoffMax:  100 * time.Millisecond,
		ReconnectBackoff: 100 * time.Millisecond,
		ShutdownTimeout:  10 * time.Second,
	}
}

// publish publishes a message with the given id (none if "") and waits for the confirm.
func (e *env) publish(tb testing.TB, id, key string) {
	tb.Helper()
	e.publishOn(tb, e.ch, id, key)
}

func (e *env) publishOn(tb testing.TB, ch *amqp.Channel, id, key string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, e.exchange, key, true, false, amqp.Publishing{
		MessageId:    id,
		Type:         key,
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		Timestamp:    time.Now(),
		Headers:      amqp.Table{"aggregate_id": "42"},
		Body:         []byte(`{"id": "` + id + `"}`),
	})
	if err != nil {
		tb.Fatalf("publish %s: %v", id, err)
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		tb.Fatalf("publish %s: not confirmed (%v)", id, err)
	}
}

// start runs c until the test ends (or the returned stop is called) and returns stop, which
// cancels Run and returns its result.
func start(tb testing.TB, c *consumer.Consumer) (stop func() error) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				runErr = errors.New("Run did not return within 30s of cancel")
			}
		})
		return runErr
	}
	tb.Cleanup(func() {
		if err := stop(); err != nil {
			tb.Errorf("Run: %v", err)
		}
	})
	return stop
}

// waitConsuming waits until queue has a consumer, so that the queue exists and is bound.
func (e *env) waitConsuming(tb testing.TB) {
	tb.Helper()
	eventually(tb, 30*time.Second, "a consumer on "+e.queue, func() bool {
		ch := openChannelQuiet(e.amqpURL)
		if ch == nil {
			return false
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive(e.queue, true, false, false, false, nil)
		return err == nil && q.Consumers > 0
	})
}

// openChannelQuiet opens a throwaway channel (a failed passive declare closes it); nil on error.
func openChannelQuiet(url string) *amqp.Channel {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil
	}
	go func() { <-ch.NotifyClose(make(chan *amqp.Error, 1)); conn.Close() }()
	return ch
}

// readyMessages returns the number of messages ready in queue.
func (e *env) readyMessages(tb testing.TB, queue string) int {
	tb.Helper()
	ch := openChannelQuiet(e.amqpURL)
	if ch == nil {
		tb.Fatal("open channel")
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		tb.Fatalf("inspect %s: %v", queue, err)
	}
	return q.Messages
}

// getDeadLetter waits for a message in the dead-letter queue and takes it.
func (e *env) getDeadLetter(tb testing.TB, dlq string) amqp.Delivery {
	tb.Helper()
	var got amqp.Delivery
	eventually(tb, 30*time.Second, "a message in "+dlq, func() bool {
		d, ok, err := e.ch.Get(dlq, true)
		if err != nil {
			tb.Fatalf("get from %s: %v", dlq, err)
		}
		got = d
		return ok
	})
	return got
}

func eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) count(tb testing.TB, sql string, args ...any) int {
	tb.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
	return n
}

// recordEffect is the handlers' business write.
func recordEffect(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
	_, err := tx.Exec(ctx, "INSERT INTO effects VALUES ($1, $2)", d.MessageID, d.Attempt)
	return err
}

// calls counts handler calls per message id.
type calls struct {
	mu sync.Mutex
	n  map[string]int
	ds []consumer.Delivery
}

func (c *calls) add(d consumer.Delivery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[d.MessageID]++
	c.ds = append(c.ds, d)
}

func (c *calls) of(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

func (c *calls) deliveries() []consumer.Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]consumer.Delivery(nil), c.ds...)
}

// errorLog collects what OnError receives.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// wantQuorum fails the test unless every named queue is a quorum queue. A passive declare does
// not compare arguments, so each is declared as a classic queue instead, on a channel of its own:
// for a quorum queue that fails with PRECONDITION_FAILED.
func (e *env) wantQuorum(tb testing.TB, queues ...string) {
	tb.Helper()
	for _, q := range queues {
		ch := openChannel(tb, e.amqpURL)
		_, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "classic"})
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
			tb.Errorf("queue %s: declaring it classic gave %v; want PRECONDITION_FAILED, as for a quorum queue", q, err)
		}
	}
}
