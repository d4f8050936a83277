package bench

import (
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
	samqp "github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/internal/streamconn"
)

// consume starts consuming what the trial's contender publishes: its queue, or for the stream
// contender its stream.
func (t *trial) consume(capacity int) (*consumer, error) {
	if t.who != WalboxStream {
		return consume(t.b.srv.AMQPURL, t.topo.queue, capacity)
	}
	if t.b.srv.StreamURL == "" {
		return nil, fmt.Errorf("%s: the broker has no stream listener", t.who)
	}
	return consumeStream(t.b.srv.StreamURL, t.streamName(), capacity)
}

// consumeStream reads the stream name from its first offset, declaring it first (walbox finds
// it then), and records arrivals as consume does.
func consumeStream(uri, name string, capacity int) (*consumer, error) {
	env, err := stream.NewEnvironment(streamconn.Options().SetUri(uri))
	if err != nil {
		return nil, fmt.Errorf("stream consumer: connect: %w", err)
	}
	if err := env.DeclareStream(name, stream.NewStreamOptions()); err != nil {
		_ = env.Close()
		return nil, fmt.Errorf("stream consumer: declare %s: %w", name, err)
	}
	var (
		mu     sync.Mutex
		closed bool
	)
	deliveries := make(chan amqp.Delivery, 1024)
	sc, err := env.NewConsumer(name, func(_ stream.ConsumerContext, m *samqp.Message) {
		mu.Lock()
		defer mu.Unlock()
		if !closed {
			deliveries <- amqp.Delivery{Body: m.GetData()}
		}
	}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()))
	if err != nil {
		_ = env.Close()
		return nil, fmt.Errorf("stream consumer: consume %s: %w", name, err)
	}
	c := &consumer{arrivals: make([]int64, capacity), sent: make([]int64, capacity), done: make(chan struct{})}
	var once sync.Once
	c.stopStream = func() {
		once.Do(func() {
			_ = sc.Close()
			mu.Lock()
			closed = true
			close(deliveries)
			mu.Unlock()
			_ = env.DeleteStream(name)
			_ = env.DeleteStream(name + ".parked")
			_ = env.Close()
		})
	}
	go c.run(deliveries)
	return c, nil
}
