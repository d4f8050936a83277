package consumer

import (
	"fmt"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
)

// deadLetters publishes the messages a StreamConsumer gives up on into the dead-letter stream,
// exactly once: the producer is named after the consumer and the stream, and a message's
// publishing id is its offset plus one, so a dead letter published again after a crash (before
// the offset moved) is dropped by the broker.
type deadLetters struct {
	env *stream.Environment
	cfg *StreamConfig
	p   *stream.Producer
	// confirms is p's confirmation channel: there is one per producer.
	confirms stream.ChannelPublishConfirm
}

func newDeadLetters(env *stream.Environment, cfg *StreamConfig) *deadLetters {
	return &deadLetters{env: env, cfg: cfg}
}

// publish dead-letters r after attempts attempts that ended with reason, and waits for the
// broker's confirm.
func (d *deadLetters) publish(r record, attempts int, reason error) error {
	if d.p == nil {
		if err := d.open(); err != nil {
			return err
		}
	}
	m := amqp.NewMessage(r.msg.GetData())
	m.Properties = r.msg.Properties
	m.ApplicationProperties = map[string]any{}
	for k, v := range r.msg.ApplicationProperties {
		m.ApplicationProperties[k] = v
	}
	m.ApplicationProperties[HeaderError] = errorHeader(reason)
	m.ApplicationProperties[HeaderAttempts] = int64(attempts)
	m.ApplicationProperties[HeaderConsumer] = d.cfg.ConsumerName
	m.ApplicationProperties["x-walbox-offset"] = r.offset
	m.SetPublishingId(r.offset + 1)
	if err := d.p.BatchSend([]message.StreamMessage{m}); err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	select {
	case batch, ok := <-d.confirms:
		if !ok {
			return fmt.Errorf("dead-letter: producer closed")
		}
		for _, cs := range batch {
			if !cs.IsConfirmed() {
				return fmt.Errorf("dead-letter: not confirmed: %w", cs.GetError())
			}
		}
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("dead-letter: no confirm in 30s")
	}
}

func (d *deadLetters) open() error {
	err := d.env.DeclareStream(d.cfg.DeadLetterStream, stream.NewStreamOptions())
	if err != nil && err != stream.StreamAlreadyExists {
		return fmt.Errorf("declare dead-letter stream: %w", err)
	}
	d.p, err = d.env.NewProducer(d.cfg.DeadLetterStream, stream.NewProducerOptions().
		SetProducerName("walbox-dead-"+d.cfg.ConsumerName+"-"+d.cfg.Stream).SetClientProvidedName(d.cfg.ConsumerName))
	if err != nil {
		return fmt.Errorf("dead-letter producer: %w", err)
	}
	d.confirms = d.p.NotifyPublishConfirmation()
	return nil
}

func (d *deadLetters) close() {
	if d.p != nil {
		_ = d.p.Close()
	}
}
