package streampub

import (
	"context"
	"errors"
	"fmt"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/internal/streamconn"
	"github.com/walbox/walbox/wire"
)

// canaryBuffer holds canaries read and not yet taken. More are dropped: the reader only needs the
// latest to come back.
const canaryBuffer = 16

// CanaryReader reads walbox's canaries from the stream, from the next message on. A stream has no
// queue of the canary's own. So the reader reads every message, and keeps those wire.IsCanary finds.
// Close it when done.
type CanaryReader struct {
	env      *stream.Environment
	consumer *stream.Consumer
	canaries chan wire.Canary
	closed   stream.ChannelClose
}

// DialCanary opens a reader of cfg.Stream from its next message.
func DialCanary(_ context.Context, cfg Config) (*CanaryReader, error) {
	env, err := stream.NewEnvironment(streamconn.Options().SetUris(cfg.URIs))
	if err != nil {
		return nil, fmt.Errorf("connect to the stream: %w", err)
	}
	r := &CanaryReader{env: env, canaries: make(chan wire.Canary, canaryBuffer)}
	r.consumer, err = env.NewConsumer(cfg.Stream, r.take, stream.NewConsumerOptions().
		SetOffset(stream.OffsetSpecification{}.Next()).SetClientProvidedName("walbox canary"))
	if err != nil {
		env.Close()
		return nil, fmt.Errorf("read stream %s: %w", cfg.Stream, err)
	}
	r.closed = r.consumer.NotifyClose()
	return r, nil
}

// take keeps a canary; the client calls it for every message.
func (r *CanaryReader) take(_ stream.ConsumerContext, m *amqp.Message) {
	if t, _ := m.ApplicationProperties[PropEventType].(string); !wire.IsCanary(t, m.ApplicationProperties) {
		return
	}
	c := wire.Canary{}
	for _, d := range m.Data {
		c.Body = append(c.Body, d...)
	}
	c.CommitTime, _ = wire.ParseCommitTime(m.ApplicationProperties[wire.HeaderCommitTime])
	select {
	case r.canaries <- c:
	default:
	}
}

// Next waits for the next canary. An error means the reader is gone: dial again.
func (r *CanaryReader) Next(ctx context.Context) (wire.Canary, error) {
	select {
	case c := <-r.canaries:
		return c, nil
	case e := <-r.closed:
		if e.Err != nil {
			return wire.Canary{}, fmt.Errorf("stream canary reader closed: %s: %w", e.Reason, e.Err)
		}
		return wire.Canary{}, errors.New("stream canary reader closed: " + e.Reason)
	case <-ctx.Done():
		return wire.Canary{}, ctx.Err()
	}
}

// Close closes the reader and its connections.
func (r *CanaryReader) Close() error {
	err := r.consumer.Close()
	return errors.Join(err, r.env.Close())
}
