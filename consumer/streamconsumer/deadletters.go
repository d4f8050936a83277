package streamconsumer

import (
	"fmt"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/consumer/internal/handling"
)

// deadLetters publishes the messages a Consumer gives up on into the dead-letter stream,
// exactly once. The producer is named after the consumer and the stream. A message's publishing
// id is its offset plus one. So the broker drops a dead letter published again after a crash,
// before the offset moved. That needs ids above the producer's last. A dead letter whose id is
// below it is a fatal error, not a message the broker silently drops. Its id is below when the
// consumer's offsets were reset, or the stream recreated.
type deadLetters struct {
	env *stream.Environment
	cfg *Config
	p   *stream.Producer
	// confirms is p's confirmation channel: there is one per producer.
	confirms stream.ChannelPublishConfirm
	// last is the producer's last stored publishing id. It starts as the broker said when p was
	// declared, then follows each dead letter stored since.
	last int64
}

func newDeadLetters(env *stream.Environment, cfg *Config) *deadLetters {
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
	id := r.offset + 1
	if id < d.last {
		// The broker would drop it, and the offset would move on: the message lost. The ids
		// are from an earlier read of the stream (its offsets reset, or the stream recreated).
		return &handling.FatalError{Err: fmt.Errorf("dead-letter offset %d: producer %s already stored publishing id %d in %s, "+
			"from an earlier read of %s (offsets reset, or the stream recreated); delete %s or set another DeadLetterStream",
			r.offset, d.name(), d.last, d.cfg.DeadLetterStream, d.cfg.Stream, d.cfg.DeadLetterStream)}
	}
	m := amqp.NewMessage(r.msg.GetData())
	m.Properties = r.msg.Properties
	m.ApplicationProperties = map[string]any{}
	for k, v := range r.msg.ApplicationProperties {
		m.ApplicationProperties[k] = v
	}
	m.ApplicationProperties[consumer.HeaderError] = handling.ErrorHeader(reason)
	m.ApplicationProperties[consumer.HeaderAttempts] = int64(attempts)
	m.ApplicationProperties[consumer.HeaderConsumer] = d.cfg.ConsumerName
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
		d.last = max(d.last, id)
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
	if d.last, err = d.env.QuerySequence(d.name(), d.cfg.DeadLetterStream); err != nil {
		return fmt.Errorf("dead-letter producer's last id: %w", err)
	}
	d.p, err = d.env.NewProducer(d.cfg.DeadLetterStream, stream.NewProducerOptions().
		SetProducerName(d.name()).SetClientProvidedName(d.cfg.ConsumerName))
	if err != nil {
		return fmt.Errorf("dead-letter producer: %w", err)
	}
	d.confirms = d.p.NotifyPublishConfirmation()
	return nil
}

// name is the dead-letter producer's name: one per consumer and stream.
func (d *deadLetters) name() string { return "walbox-dead-" + d.cfg.ConsumerName + "-" + d.cfg.Stream }

func (d *deadLetters) close() {
	if d.p != nil {
		_ = d.p.Close()
	}
}
