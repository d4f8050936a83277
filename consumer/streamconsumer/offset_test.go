package streamconsumer_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/consumer/streamconsumer"
	"github.com/walbox/walbox/internal/streamconn"
	"github.com/walbox/walbox/internal/testenv"
)

// offsetEnv is a database with an effects table and a stream of tiny segments, so that
// retention removes messages soon.
type offsetEnv struct {
	*streamEnv
	env  *stream.Environment
	opts *stream.StreamOptions
}

func newOffsetEnv(t *testing.T) *offsetEnv {
	t.Helper()
	skipShort(t)
	oe := newOffsetEnvOn(t, testenv.SharedRabbitStream(t), testenv.UniqueName("events"))
	oe.declare(t)
	return oe
}

// newOffsetEnvOn is newOffsetEnv on the broker r and the stream name, which it does not declare.
func newOffsetEnvOn(t *testing.T, r *testenv.Rabbit, name string) *offsetEnv {
	t.Helper()
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
	env, err := stream.NewEnvironment(streamconn.Options().SetUri(r.StreamURL()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Close() })
	return &offsetEnv{streamEnv: &streamEnv{pool: pool, dbURL: dbURL, uri: r.StreamURL(), stream: name},
		env: env, opts: stream.NewStreamOptions().SetMaxSegmentSizeBytes(stream.ByteCapacity{}.B(20000)).
			SetMaxLengthBytes(stream.ByteCapacity{}.B(40000))}
}

func (oe *offsetEnv) declare(t *testing.T) {
	t.Helper()
	if err := oe.env.DeclareStream(oe.stream, oe.opts); err != nil {
		t.Fatal(err)
	}
}

// publish stores n messages of pad bytes each in the stream, with an unnamed producer, and
// waits for their confirms.
func (oe *offsetEnv) publish(t *testing.T, n, pad int) {
	t.Helper()
	p, err := oe.env.NewProducer(oe.stream, stream.NewProducerOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	confirms := p.NotifyPublishConfirmation()
	for i := 0; i < n; i += 100 {
		var batch []message.StreamMessage
		for range min(100, n-i) {
			m := amqp.NewMessage([]byte(strings.Repeat("x", pad)))
			m.Properties = &amqp.MessageProperties{MessageID: uuid.NewString()}
			batch = append(batch, m)
		}
		if err := p.BatchSend(batch); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(batch); {
			select {
			case cs := <-confirms:
				for _, c := range cs {
					if !c.IsConfirmed() {
						t.Fatalf("publish: not confirmed: %v", c.GetError())
					}
				}
				got += len(cs)
			case <-time.After(30 * time.Second):
				t.Fatalf("publish: %d of %d confirms", got, len(batch))
			}
		}
	}
}

// firstOffset is the offset of the stream's first message (a broker before 3.11 has no stream
// statistics to ask).
func (oe *offsetEnv) firstOffset(t *testing.T) int64 {
	t.Helper()
	got := make(chan int64, 1)
	c, err := oe.env.NewConsumer(oe.stream, func(cc stream.ConsumerContext, _ *amqp.Message) {
		select {
		case got <- cc.Consumer.GetOffset():
		default:
		}
	}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case first := <-got:
		return first
	case <-time.After(30 * time.Second):
		t.Fatal("no message in the stream")
		return 0
	}
}

// errorLog keeps what a consumer gave to OnError.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

// offsetErrors returns the *OffsetErrors given to OnError.
func (l *errorLog) offsetErrors() []*streamconsumer.OffsetError {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*streamconsumer.OffsetError
	for _, err := range l.errs {
		var oe *streamconsumer.OffsetError
		if errors.As(err, &oe) {
			out = append(out, oe)
		}
	}
	return out
}

// consume runs a consumer that records effects until its stored offset is want, then stops it.
func (oe *offsetEnv) consume(t *testing.T, reset streamconsumer.OffsetReset, want int) *errorLog {
	t.Helper()
	log := &errorLog{}
	cfg := oe.config()
	cfg.OffsetReset, cfg.OnError = reset, log.add
	c, err := streamconsumer.New(oe.pool, cfg, recordEffect)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	oe.waitOffset(t, want, 2*time.Minute)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	return log
}

// refused runs a consumer that refuses offset resets and checks that Run returns an
// *OffsetError, given to OnError too, and that nothing was handled or stored.
func (oe *offsetEnv) refused(t *testing.T, stored int) *streamconsumer.OffsetError {
	t.Helper()
	effects := oe.count(t, "SELECT count(*) FROM effects")
	log := &errorLog{}
	cfg := oe.config()
	cfg.OnError = log.add
	c, err := streamconsumer.New(oe.pool, cfg, recordEffect)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = c.Run(ctx)
	var oerr *streamconsumer.OffsetError
	if !errors.As(err, &oerr) || !streamconsumer.Fatal(err) {
		t.Fatalf("Run: %v; want a fatal *OffsetError", err)
	}
	if got := log.offsetErrors(); len(got) != 1 || got[0] != oerr {
		t.Errorf("OnError got %v; want the error Run returned", got)
	}
	if oerr.Stored != int64(stored) || oerr.ResetTo != -1 {
		t.Errorf("OffsetError %+v: want stored %d, no reset", oerr, stored)
	}
	if got := oe.count(t, "SELECT count(*) FROM effects"); got != effects {
		t.Errorf("%d effects after the refusal, want %d", got, effects)
	}
	oe.waitOffset(t, stored, time.Second)
	t.Log(err)
	return oerr
}

// Retention removed messages the consumer never handled: Run refuses the stored offset below
// the stream's first one. With ResetToFirst it goes on from the first message left, once each.
// (Before, it started at the first retained message without a word.)
func TestStreamConsumerRefusesAnOffsetBelowTheFirst(t *testing.T) {
	oe := newOffsetEnv(t)
	oe.publish(t, 20, 10)
	oe.consume(t, streamconsumer.RefuseReset, 20)
	const more = 1000
	oe.publish(t, more, 200)
	deadline := time.Now().Add(time.Minute)
	for oe.firstOffset(t) <= 20 {
		if time.Now().After(deadline) {
			t.Fatalf("retention left the stream's first offset at %d", oe.firstOffset(t))
		}
		time.Sleep(100 * time.Millisecond)
	}

	oerr := oe.refused(t, 20)
	if oerr.First <= 20 || !strings.Contains(oerr.Error(), "below the stream's first message") {
		t.Errorf("OffsetError %+v (%v): want one below the first", oerr, oerr)
	}

	end := 20 + more
	log := oe.consume(t, streamconsumer.ResetToFirst, end)
	resets := log.offsetErrors()
	if len(resets) != 1 || resets[0].ResetTo < 20 || resets[0].Stored != 20 {
		t.Fatalf("OnError got resets %+v; want one from 20 to the first offset", resets)
	}
	first := int(resets[0].ResetTo)
	if got, want := oe.count(t, "SELECT count(*) FROM effects"), 20+end-first; got != want {
		t.Errorf("%d effects, want %d: 20, then offsets %d to %d", got, want, first, end-1)
	}
	if got := oe.count(t, "SELECT count(*) FROM (SELECT message_id FROM effects GROUP BY 1 HAVING count(*) > 1) d"); got != 0 {
		t.Errorf("%d messages handled more than once", got)
	}
}

// The stream was deleted and declared again, with fewer messages than the consumer had
// handled: Run refuses the stored offset past the end. With ResetToEnd it skips what the
// stream holds and handles what comes after. (Before, it skipped every new message until the
// stream reached the old offset.)
func TestStreamConsumerRefusesAnOffsetPastTheEnd(t *testing.T) {
	oe := newOffsetEnv(t)
	oe.publish(t, 30, 10)
	oe.consume(t, streamconsumer.RefuseReset, 30)
	if err := oe.env.DeleteStream(oe.stream); err != nil {
		t.Fatal(err)
	}
	oe.declare(t)
	oe.publish(t, 5, 10)

	oerr := oe.refused(t, 30)
	if oerr.End != 5 || !strings.Contains(oerr.Error(), "past the stream's end") {
		t.Errorf("OffsetError %+v (%v): want one past the end 5", oerr, oerr)
	}

	// ResetToEnd: the 5 messages are skipped; the 3 published after the reset are handled.
	log := &errorLog{}
	cfg := oe.config()
	cfg.OffsetReset, cfg.OnError = streamconsumer.ResetToEnd, log.add
	c, err := streamconsumer.New(oe.pool, cfg, recordEffect)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	oe.waitOffset(t, 5, time.Minute)
	oe.publish(t, 3, 10)
	oe.waitOffset(t, 8, time.Minute)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if resets := log.offsetErrors(); len(resets) != 1 || resets[0].ResetTo != 5 {
		t.Errorf("OnError got resets %+v; want one from 30 to 5", resets)
	}
	if got := oe.count(t, "SELECT count(*) FROM effects"); got != 30+3 {
		t.Errorf("%d effects, want 33: the first stream's 30 and the 3 after the reset", got)
	}
}

// ResetToFirst on a stream declared again handles every message of the new stream once.
func TestStreamConsumerResetToFirstAfterTheStreamWasDeclaredAgain(t *testing.T) {
	oe := newOffsetEnv(t)
	oe.publish(t, 30, 10)
	oe.consume(t, streamconsumer.RefuseReset, 30)
	if err := oe.env.DeleteStream(oe.stream); err != nil {
		t.Fatal(err)
	}
	oe.declare(t)
	oe.publish(t, 5, 10)
	log := oe.consume(t, streamconsumer.ResetToFirst, 5)
	if resets := log.offsetErrors(); len(resets) != 1 || resets[0].ResetTo != 0 || resets[0].End != 5 {
		t.Errorf("OnError got resets %+v; want one from 30 to 0", resets)
	}
	if got := oe.count(t, "SELECT count(*) FROM effects"); got != 35 {
		t.Errorf("%d effects, want 35", got)
	}
}

// A consumer that has stored nothing starts at the stream's first message, wherever
// retention left it, without a word; an unknown OffsetReset is refused by New.
func TestStreamConsumerNewConsumerStartsAtTheFirst(t *testing.T) {
	if _, err := streamconsumer.New(&pgxpool.Pool{}, streamconsumer.Config{URIs: []string{"rabbitmq-stream://x"},
		Stream: "s", ConsumerName: "c", OffsetReset: 7}, recordEffect); err == nil || !strings.Contains(err.Error(), "offset reset 7") {
		t.Errorf("New with OffsetReset 7: %v", err)
	}
	oe := newOffsetEnv(t)
	oe.publish(t, 1000, 200)
	deadline := time.Now().Add(time.Minute)
	for oe.firstOffset(t) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("retention removed nothing")
		}
		time.Sleep(100 * time.Millisecond)
	}
	log := oe.consume(t, streamconsumer.RefuseReset, 1000)
	if got := log.offsetErrors(); len(got) != 0 {
		t.Errorf("OnError got %v", got)
	}
	if got := oe.count(t, "SELECT count(*) FROM effects"); got == 0 || got > 1000 {
		t.Errorf("%d effects", got)
	}
}
