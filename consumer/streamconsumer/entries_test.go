package streamconsumer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
	"github.com/walbox/walbox/consumer/streamconsumer"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/wire"
	"sync"
)

// A stream holds entries that are not messages, each with an offset of its own: a named
// producer's state at the start of every segment (walbox's producer is named), and the offsets
// that other applications store in the stream (the broker's offset tracking). A consumer reading
// past them handles every message once: they are no gap that retention made. (Before, the first
// such entry stopped Run with an *OffsetError claiming retention removed a message; with
// ResetToEnd the consumer skipped to the stream's end.)
func TestStreamConsumerReadsPastEntriesThatAreNotMessages(t *testing.T) {
	skipShort(t)
	r := testenv.StartRabbitStream(t)
	name := testenv.UniqueName("events")
	r.Ctl(t, "set_policy", "--apply-to", "queues", "small-segments", "^"+name+"$", `{"stream-max-segment-size-bytes":20000}`)
	oe := newOffsetEnvOn(t, r, name)

	s, err := streampub.Dial(context.Background(), streampub.Config{URIs: []string{oe.uri}, Stream: name, Producer: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 600
	for i := range n {
		m := &wire.Message{ID: uuid.New(), EventType: "order.created",
			Payload: []byte(fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, strings.Repeat("x", 200)))}
		s.At(1, uint64(i+1), 0)
		if _, err := s.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		if i%20 == 19 {
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			for range 20 {
				if c := <-s.Confirms(); c.Err != nil {
					t.Fatal(c.Err)
				}
			}
		}
		if i%150 == 149 {
			if err := oe.env.StoreOffset("other-app", name, int64(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	offsets := oe.messages(t, n)
	var entries []int64 // offsets that hold no message
	for i := 1; i < n; i++ {
		for o := offsets[i-1].offset + 1; o < offsets[i].offset; o++ {
			entries = append(entries, o)
		}
	}
	if len(entries) < 2 {
		t.Fatalf("entries besides the messages at %v: too few, the test proves nothing", entries)
	}
	t.Logf("%d messages; entries that are no message at offsets %v", n, entries)

	// Read it all at once.
	oe.handleAll(t, n)

	// Stopped just before an entry that is no message: its stored offset is that entry's.
	g := entries[0]
	if _, err := oe.pool.Exec(context.Background(), "UPDATE walbox_stream_offsets SET next_offset = $1", g); err != nil {
		t.Fatal(err)
	}
	var again []string
	for _, m := range offsets {
		if m.offset > g {
			again = append(again, m.id)
		}
	}
	if _, err := oe.pool.Exec(context.Background(), "DELETE FROM effects WHERE message_id = ANY($1)", again); err != nil {
		t.Fatal(err)
	}
	oe.handleAll(t, n)
}

// handleAll runs a consumer until the stream's n messages are handled, and checks that each was
// handled once, with no word of an offset outside the stream.
func (oe *offsetEnv) handleAll(t *testing.T, n int) {
	t.Helper()
	log := &errorLog{}
	cfg := oe.config()
	cfg.OnError = log.add
	c, err := streamconsumer.New(oe.pool, cfg, recordEffect)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	deadline := time.Now().Add(2 * time.Minute)
	for oe.count(t, "SELECT count(*) FROM effects") < n && time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("Run returned %v with %d of %d messages handled", err, oe.count(t, "SELECT count(*) FROM effects"), n)
		case <-time.After(100 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := log.offsetErrors(); len(got) != 0 {
		t.Errorf("OnError got %v", got)
	}
	if got := oe.count(t, "SELECT count(*) FROM effects"); got != n {
		t.Errorf("%d effects, want %d", got, n)
	}
	if got := oe.count(t, "SELECT count(*) FROM (SELECT message_id FROM effects GROUP BY 1 HAVING count(*) > 1) d"); got != 0 {
		t.Errorf("%d messages handled more than once", got)
	}
}

// streamMessage is a message's offset and id.
type streamMessage struct {
	offset int64
	id     string
}

// messages reads the stream's n messages from its first offset.
func (oe *offsetEnv) messages(t *testing.T, n int) []streamMessage {
	t.Helper()
	var (
		mu   sync.Mutex
		out  []streamMessage
		done = make(chan struct{})
	)
	c, err := oe.env.NewConsumer(oe.stream, func(cc stream.ConsumerContext, m *amqp.Message) {
		mu.Lock()
		defer mu.Unlock()
		if len(out) < n {
			out = append(out, streamMessage{cc.Consumer.GetOffset(), fmt.Sprint(m.Properties.MessageID)})
			if len(out) == n {
				close(done)
			}
		}
	}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("read %d of %d messages", len(out), n)
	}
	mu.Lock()
	defer mu.Unlock()
	return out
}

// A consumer that handled every message is started again: its stored offset is the stream's
// end, which is inside the stream. It handles the messages published later, without a word to
// OnError.
func TestStreamConsumerCaughtUpRestartIsNotRefused(t *testing.T) {
	oe := newOffsetEnv(t)
	oe.publish(t, 250, 10)
	oe.consume(t, streamconsumer.RefuseReset, 250)
	log := &errorLog{}
	cfg := oe.config()
	cfg.OnError = log.add
	c, err := streamconsumer.New(oe.pool, cfg, recordEffect)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	oe.publish(t, 7, 10)
	oe.waitOffset(t, 257, time.Minute)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := log.offsetErrors(); len(got) != 0 {
		t.Errorf("OnError got %v", got)
	}
	if got := oe.count(t, "SELECT count(*) FROM effects"); got != 257 {
		t.Errorf("%d effects, want 257", got)
	}
}
