package streamconsumer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/consumer/streamconsumer"
	"github.com/walbox/walbox/internal/streamconn"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/wire"
)

// streamEnv is a database with an effects table and a stream of n messages written by walbox's
// stream publisher; ids[i] is the message id at offset i.
type streamEnv struct {
	pool               *pgxpool.Pool
	dbURL, uri, stream string
	ids                []string
}

func newStreamEnv(t *testing.T, n int) *streamEnv {
	t.Helper()
	return newStreamEnvPadded(t, n, 0)
}

// newStreamEnvPadded is newStreamEnv with pad more bytes in each message's payload.
func newStreamEnvPadded(t *testing.T, n, pad int) *streamEnv {
	t.Helper()
	msgs := make([]*wire.Message, n)
	for i := range n {
		body := fmt.Sprintf(`{"n":%d}`, i)
		if pad > 0 {
			body = fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, strings.Repeat("x", pad))
		}
		msgs[i] = &wire.Message{ID: uuid.New(), EventType: "order.created", Payload: []byte(body)}
	}
	return newStreamEnvOf(t, msgs)
}

// newStreamEnvOf is newStreamEnv with the messages msgs.
func newStreamEnvOf(t *testing.T, msgs []*wire.Message) *streamEnv {
	t.Helper()
	skipShort(t)
	r := testenv.SharedRabbitStream(t)
	pg := testenv.SharedPostgres(t)
	dbURL := pg.NewDatabase(t)
	conn := pg.Conn(t, dbURL)
	if _, err := conn.Exec(context.Background(), "CREATE TABLE effects (message_id text NOT NULL, attempt int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	se := &streamEnv{pool: pool, dbURL: dbURL, uri: r.StreamURL(), stream: testenv.UniqueName("events")}
	s, err := streampub.Dial(context.Background(), streampub.Config{URIs: []string{se.uri}, Stream: se.stream,
		Producer: "test", Window: len(msgs) + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, m := range msgs {
		se.ids = append(se.ids, m.ID.String())
		s.At(1, uint64(i+1), 0)
		if _, err := s.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for range msgs {
		if c := <-s.Confirms(); c.Err != nil {
			t.Fatal(c.Err)
		}
	}
	return se
}

func (se *streamEnv) config() streamconsumer.Config {
	return streamconsumer.Config{URIs: []string{se.uri}, Stream: se.stream, ConsumerName: "billing",
		MaxAttempts: 3, RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 20 * time.Millisecond,
		ReconnectBackoff: 100 * time.Millisecond}
}

// waitOffset waits until the consumer's stored next offset is n.
func (se *streamEnv) waitOffset(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var next int
		err := se.pool.QueryRow(context.Background(), "SELECT next_offset FROM walbox_stream_offsets WHERE consumer = 'billing'").Scan(&next)
		if err == nil && next == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stored offset %d (%v) after %v, want %d", next, err, timeout, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runUntil runs a consumer of cfg with h until the stored next offset is n.
func (se *streamEnv) runUntil(t *testing.T, cfg streamconsumer.Config, h consumer.Handler, n int) {
	t.Helper()
	se.runWhile(t, cfg, h, func() { se.waitOffset(t, n, time.Minute) })
}

// runWhile runs a consumer of cfg with h until wait returns, then stops it.
func (se *streamEnv) runWhile(t *testing.T, cfg streamconsumer.Config, h consumer.Handler, wait func()) {
	t.Helper()
	c, err := streamconsumer.New(se.pool, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	wait()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A message whose handler fails is retried in place, then dead-lettered; every other message
// is handled once, with no row per message besides the handler's own.
func TestStreamConsumerRetriesAndDeadLetters(t *testing.T) {
	se := newStreamEnv(t, 40)
	flaky, poison := se.ids[10], se.ids[20]
	h := func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		if err := recordEffect(ctx, tx, d); err != nil {
			return err
		}
		switch {
		case d.MessageID == flaky && d.Attempt < 3:
			return errors.New("flaky")
		case d.MessageID == poison:
			return errors.New("poison")
		}
		return nil
	}
	se.runUntil(t, se.config(), h, 40)
	for i, id := range se.ids {
		want := 1
		if id == poison {
			want = 0
		}
		if got := se.count(t, "SELECT count(*) FROM effects WHERE message_id = $1", id); got != want {
			t.Errorf("message %d: handled %d times, want %d", i, got, want)
		}
	}
	if got := se.count(t, "SELECT attempt FROM effects WHERE message_id = $1", flaky); got != 3 {
		t.Errorf("flaky message committed at attempt %d, want 3", got)
	}
	dead := readAll(t, se.uri, se.stream+".dead", 1)
	if got := fmt.Sprint(dead[0].Properties.MessageID); got != poison {
		t.Errorf("dead letter %s, want %s", got, poison)
	}
	if got := dead[0].ApplicationProperties[consumer.HeaderError]; !strings.Contains(fmt.Sprint(got), "poison") {
		t.Errorf("dead letter's %s: %v", consumer.HeaderError, got)
	}
}

// A handler that panics is retried in place, as one that returns an error. The queue consumer
// does the same through its retry queues.
func TestStreamConsumerRetriesAPanic(t *testing.T) {
	se := newStreamEnv(t, 3)
	panicky := se.ids[1]
	cfg := se.config()
	retried := messageErrors(&cfg)
	h := func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		if err := recordEffect(ctx, tx, d); err != nil {
			return err
		}
		if d.MessageID == panicky && d.Attempt < 3 {
			panic("handler bug")
		}
		return nil
	}
	se.runUntil(t, cfg, h, 3)
	if got := se.count(t, "SELECT count(*) FROM effects WHERE message_id = $1 AND attempt = 3", panicky); got != 1 {
		t.Errorf("%d effects of attempt 3, want 1", got)
	}
	if got := se.count(t, "SELECT count(*) FROM effects"); got != 3 {
		t.Errorf("%d effects, want 3 (the attempts that panicked leave none)", got)
	}
	if len(retried()) != 2 {
		t.Fatalf("OnError heard %q, want 2 message errors", retried())
	}
	for _, m := range retried() {
		if !strings.Contains(m, "handler panic: handler bug") {
			t.Errorf("message error %q, want the panic in it", m)
		}
	}
}

// A handler that ends its transaction itself, or leaves it failed, is retried, then
// dead-lettered, as by the queue consumer. So is one that ends it with its own statement. It used to fail the offset update instead: the
// session started again at attempt 1, for good. A retry after the handler's own commit finds
// the message handled.
func TestStreamConsumerHandlerThatSpoilsItsTransaction(t *testing.T) {
	// The last message is plain. The offset the handler's own COMMIT stores then does not end
	// the run before the consumer hears of it.
	se := newStreamEnv(t, 7)
	spoilt, selfCommit, alwaysFailed := se.ids[0], se.ids[1], se.ids[2]
	rollbackStatement, commitStatement := se.ids[4], se.ids[5]
	cfg := se.config()
	retried := messageErrors(&cfg)
	var handedBack atomic.Int32
	h := func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		if err := recordEffect(ctx, tx, d); err != nil {
			return err
		}
		switch {
		case d.MessageID == spoilt && d.Attempt == 1, d.MessageID == selfCommit && d.Attempt == 1:
			end := tx.Rollback // ends it
			if d.MessageID == selfCommit {
				end = tx.Commit // ends it, the message handled
			}
			err := end(ctx)
			if testenv.IdleInPool(ctx, se.pool, tx.Conn()) {
				handedBack.Add(1) // another goroutine could take it while the consumer reads its state
			}
			return err
		case d.MessageID == spoilt && d.Attempt == 2, d.MessageID == alwaysFailed:
			_, _ = tx.Exec(ctx, "SELECT 1/0") // leaves it failed
		case d.MessageID == rollbackStatement && d.Attempt == 1:
			_, err := tx.Exec(ctx, "ROLLBACK") // ends it unknown to pgx
			return err
		case d.MessageID == commitStatement && d.Attempt == 1:
			_, err := tx.Exec(ctx, "COMMIT") // ends it unknown to pgx, the message handled
			return err
		}
		return nil
	}
	se.runUntil(t, cfg, h, 7)
	if n := handedBack.Load(); n != 0 {
		t.Errorf("the pool had the handler's connection idle %d times after the handler ended its transaction", n)
	}
	for _, want := range []struct {
		id             string
		attempt, count int
	}{{spoilt, 3, 1}, {selfCommit, 1, 1}, {alwaysFailed, 0, 0}, {se.ids[3], 1, 1},
		{rollbackStatement, 2, 1}, {commitStatement, 1, 1}, {se.ids[6], 1, 1}} {
		if got := se.count(t, "SELECT count(*) FROM effects WHERE message_id = $1", want.id); got != want.count {
			t.Errorf("message %s: %d effects, want %d", want.id, got, want.count)
		}
		if got := se.count(t, "SELECT count(*) FROM effects WHERE message_id = $1 AND attempt = $2", want.id, want.attempt); got != want.count {
			t.Errorf("message %s: %d effects of attempt %d, want %d", want.id, got, want.attempt, want.count)
		}
	}
	dead := readAll(t, se.uri, se.stream+".dead", 1)
	if got := fmt.Sprint(dead[0].Properties.MessageID); got != alwaysFailed {
		t.Errorf("dead letter %s, want %s", got, alwaysFailed)
	}
	const unusable = "handler left the transaction unusable"
	if got := fmt.Sprint(dead[0].ApplicationProperties[consumer.HeaderError]); !strings.Contains(got, unusable) {
		t.Errorf("dead letter's %s: %q, want %q in it", consumer.HeaderError, got, unusable)
	}
	if len(retried()) != 2+1+3+1+1 {
		t.Errorf("OnError heard %q, want 8 message errors", retried())
	}
	for _, m := range retried() {
		if !strings.Contains(m, unusable) {
			t.Errorf("message error %q, want %q in it", m, unusable)
		}
	}
}

// A handler cut short by the end of Run's context abandons its message. That is no message
// error: OnError hears none, and the next run handles the message.
func TestStreamConsumerShutdownIsNoMessageError(t *testing.T) {
	se := newStreamEnv(t, 1)
	cfg := se.config()
	retried := messageErrors(&cfg)
	started := make(chan struct{}, 1)
	stuck := func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return ctx.Err()
	}
	se.runWhile(t, cfg, stuck, func() {
		select {
		case <-started:
		case <-time.After(time.Minute):
			t.Fatal("the handler did not start in a minute")
		}
	})
	if got := retried(); len(got) != 0 {
		t.Errorf("OnError heard %q at shutdown, want no message error", got)
	}
	se.runUntil(t, se.config(), func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		return recordEffect(ctx, tx, d)
	}, 1)
	if got := se.count(t, "SELECT count(*) FROM effects"); got != 1 {
		t.Errorf("%d effects after the next run, want 1", got)
	}
}

// messageErrors sets cfg.OnError to keep the text of each *consumer.MessageError. It returns
// those heard so far.
func messageErrors(cfg *streamconsumer.Config) func() []string {
	var mu sync.Mutex
	var heard []string
	cfg.OnError = func(err error) {
		var me *consumer.MessageError
		if errors.As(err, &me) {
			mu.Lock()
			defer mu.Unlock()
			heard = append(heard, me.Error())
		}
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), heard...)
	}
}

// The consumer's connections to the broker keep the receive buffer the kernel sizes and grows.
// The client's default of 8 KB gave a window below one loopback segment (internal/streamconn).
// The broker's sends then waited on a 200 ms TCP timer: 4 MB of messages took about a minute.
// The check reads the buffer's size, not a clock, so a slow machine cannot fail it.
func TestStreamConsumerLeavesItsReceiveBufferToTheKernel(t *testing.T) {
	const n = 2000
	se := newStreamEnvPadded(t, n, 2000)
	before := testenv.ReceiveBuffers(t, se.uri)
	se.runWhile(t, se.config(), func(context.Context, pgx.Tx, consumer.Delivery) error { return nil }, func() {
		se.waitOffset(t, n, 2*time.Minute)
		testenv.CheckNewReceiveBuffers(t, se.uri, before)
	})
}

// The consumer process is SIGKILLed again and again while it handles a stream: every message
// is handled exactly once, by the offset stored with the handler's writes.
func TestStreamConsumerKilledRepeatedly(t *testing.T) {
	const n, kills = 3000, 8
	se := newStreamEnv(t, n)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	start := func() *testenv.Program {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), streamChildEnv+"=1", "CHILD_DB="+se.dbURL, "CHILD_URI="+se.uri, "CHILD_STREAM="+se.stream)
		return testenv.Start(t, cmd)
	}
	for i := range kills {
		p := start()
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		p.Kill()
		t.Logf("kill %d: %d handled", i+1, se.count(t, "SELECT count(*) FROM effects"))
	}
	p := start()
	se.waitOffset(t, n, 2*time.Minute)
	p.Kill()
	if got := se.count(t, "SELECT count(DISTINCT message_id) FROM effects"); got != n {
		t.Errorf("%d messages handled, want %d", got, n)
	}
	if got := se.count(t, "SELECT count(*) FROM (SELECT message_id FROM effects GROUP BY 1 HAVING count(*) > 1) d"); got != 0 {
		t.Errorf("%d messages handled more than once", got)
	}
	if got := se.count(t, "SELECT count(*) FROM effects"); got != n {
		t.Errorf("%d handler commits, want %d", got, n)
	}
}

// streamChildEnv makes the test binary a stream consumer (TestMain), for the kill test.
const streamChildEnv = "WALBOX_TEST_STREAM_CONSUMER_CHILD"

func runStreamChild() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("CHILD_DB"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := streamconsumer.New(pool, streamconsumer.Config{URIs: []string{os.Getenv("CHILD_URI")},
		Stream: os.Getenv("CHILD_STREAM"), ConsumerName: "billing", ReconnectBackoff: 100 * time.Millisecond,
		OnError: func(err error) { fmt.Fprintln(os.Stderr, err) }}, slowEffect)
	if err == nil {
		err = c.Run(ctx)
	}
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// slowEffect records the effect a little slowly, so that kills land in mid-stream.
func slowEffect(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
	time.Sleep(time.Millisecond)
	return recordEffect(ctx, tx, d)
}

// readAll reads n messages of a stream from its first offset.
func readAll(t *testing.T, uri, name string, n int) []*amqp.Message {
	t.Helper()
	env, err := stream.NewEnvironment(streamconn.Options().SetUri(uri))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	got := make(chan *amqp.Message, n)
	c, err := env.NewConsumer(name, func(_ stream.ConsumerContext, m *amqp.Message) { got <- m },
		stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out []*amqp.Message
	for len(out) < n {
		select {
		case m := <-got:
			out = append(out, m)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d messages in %s", len(out), n, name)
		}
	}
	return out
}

// The dead-letter producer already stored higher ids (the consumer's offsets were reset, or the
// stream recreated): the broker would drop the dead letter and the offset move past the message.
// Run stops instead, naming the dead-letter stream, with the offset still at the message.
func TestStreamConsumerDeadLetterBelowTheProducersLastIDStops(t *testing.T) {
	se := newStreamEnv(t, 30)
	env, err := stream.NewEnvironment(streamconn.Options().SetUri(se.uri))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	dead := se.stream + ".dead"
	if err := env.DeclareStream(dead, stream.NewStreamOptions()); err != nil {
		t.Fatal(err)
	}
	p, err := env.NewProducer(dead, stream.NewProducerOptions().SetProducerName("walbox-dead-billing-"+se.stream))
	if err != nil {
		t.Fatal(err)
	}
	old := amqp.NewMessage([]byte("a dead letter of an earlier read"))
	old.SetPublishingId(1000)
	confirms := p.NotifyPublishConfirmation()
	if err := p.BatchSend([]message.StreamMessage{old}); err != nil {
		t.Fatal(err)
	}
	<-confirms
	_ = p.Close()

	poison := se.ids[20]
	c, err := streamconsumer.New(se.pool, se.config(), func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		if d.MessageID == poison {
			return errors.New("poison")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = c.Run(ctx)
	if !streamconsumer.Fatal(err) || !strings.Contains(fmt.Sprint(err), dead) {
		t.Fatalf("Run: %v; want a fatal error naming %s", err, dead)
	}
	se.waitOffset(t, 20, time.Second)
}

// Two instances of one consumer read the stream at once: the offset row's lock lets one of them
// handle each message, the other skips it.
func TestStreamConsumerTwoInstancesHandleEachMessageOnce(t *testing.T) {
	const n = 500
	se := newStreamEnv(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	for range 2 {
		c, err := streamconsumer.New(se.pool, se.config(), slowEffect)
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- c.Run(ctx) }()
	}
	se.waitOffset(t, n, 2*time.Minute)
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	if got := se.count(t, "SELECT count(DISTINCT message_id) FROM effects"); got != n {
		t.Errorf("%d messages handled, want %d", got, n)
	}
	if got := se.count(t, "SELECT count(*) FROM effects"); got != n {
		t.Errorf("%d handler commits, want %d: a message handled by both", got, n)
	}
}
