package streampub_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/internal/streamconn"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/wire"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// waitFor bounds every wait in these tests.
const waitFor = 30 * time.Second

// config returns a session configuration for a fresh stream on node r.
func config(r *testenv.Rabbit) streampub.Config {
	return streampub.Config{URIs: []string{r.StreamURL()}, Stream: testenv.UniqueName("events"),
		Slot: testenv.UniqueName("slot"), ScanTimeout: 3 * time.Second}
}

// The database system and database the tests' sessions are bound to, unless a test says.
const (
	system   = 7000000000000000001
	database = "app"
)

// dial opens a session bound to the tests' database system.
func dial(tb testing.TB, cfg streampub.Config) *streampub.Session {
	tb.Helper()
	s, err := dialBound(cfg, system)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// dialBound opens a session bound to the database system sys, or returns the first error.
func dialBound(cfg streampub.Config, sys uint64) (*streampub.Session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	s, err := streampub.Dial(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("Dial: %w", err)
	}
	if cfg.Producer != "" {
		return s, nil
	}
	if err := s.Bind(ctx, sys, database); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("Bind: %w", err)
	}
	return s, nil
}

// row is the message at position (1, lsn, index).
func row(lsn uint64, index int) (streampub.Position, *wire.Message) {
	pos := streampub.Position{Timeline: 1, LSN: lsn, Index: index}
	return pos, &wire.Message{ID: uuid.New(), EventType: "order.created", AggregateType: "order",
		AggregateID: pos.String(), Payload: []byte(`{"n":1}`), CreatedAt: time.Unix(1700000000, 0).UTC()}
}

// publishAll publishes msgs at their positions and waits for every confirm.
func publishAll(tb testing.TB, s *streampub.Session, pos []streampub.Position, msgs []*wire.Message) {
	tb.Helper()
	for i, m := range msgs {
		s.At(pos[i].Timeline, pos[i].LSN, pos[i].Index)
		if _, err := s.Publish(context.Background(), m); err != nil {
			tb.Fatalf("Publish %d: %v", i, err)
		}
	}
	if err := s.Flush(); err != nil {
		tb.Fatalf("Flush: %v", err)
	}
	waitConfirms(tb, s, len(msgs))
}

func waitConfirms(tb testing.TB, s *streampub.Session, n int) {
	tb.Helper()
	timeout := time.After(waitFor)
	for got := 0; got < n; got++ {
		select {
		case c, ok := <-s.Confirms():
			if !ok || c.Err != nil {
				tb.Fatalf("confirm %d of %d: ok %v, err %v", got+1, n, ok, c.Err)
			}
		case <-timeout:
			tb.Fatalf("%d of %d confirms after %v", got, n, waitFor)
		}
	}
}

// readStream reads the stream from its first offset until it has delivered nothing for a
// second, and returns its messages in order.
func readStream(tb testing.TB, uri, name string) []*amqp.Message {
	tb.Helper()
	env, err := stream.NewEnvironment(streamconn.Options().SetUri(uri))
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	defer env.Close()
	var (
		mu   sync.Mutex
		msgs []*amqp.Message
		last = time.Now()
	)
	c, err := env.NewConsumer(name, func(_ stream.ConsumerContext, m *amqp.Message) {
		mu.Lock()
		defer mu.Unlock()
		msgs, last = append(msgs, m), time.Now()
	}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()))
	if err != nil {
		tb.Fatalf("consume: %v", err)
	}
	defer c.Close()
	for deadline := time.Now().Add(waitFor); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		quiet := time.Since(last) > time.Second
		mu.Unlock()
		if quiet {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return msgs
}

// positions returns each message's position property.
func positions(msgs []*amqp.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i], _ = m.ApplicationProperties[streampub.PropPosition].(string)
	}
	return out
}

// declareTrimmed declares stream name with small segments and 40 kB of retention, so that retention
// removes its first messages soon. It returns the connection, closed when the test ends.
func declareTrimmed(tb testing.TB, uri, name string) *stream.Environment {
	tb.Helper()
	env, err := stream.NewEnvironment(streamconn.Options().SetUri(uri))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = env.Close() })
	err = env.DeclareStream(name, stream.NewStreamOptions().SetMaxSegmentSizeBytes(stream.ByteCapacity{}.B(20000)).
		SetMaxLengthBytes(stream.ByteCapacity{}.B(40000)))
	if err != nil {
		tb.Fatal(err)
	}
	return env
}
