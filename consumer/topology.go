package consumer

import (
	"fmt"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/wire"
)

// setup opens the session's channel in confirm mode, declares the topology and starts
// consuming. The channel closed receives the reason when the session's channel closes.
func (c *Consumer) setup(conn *amqp.Connection) (ch *amqp.Channel, deliveries <-chan amqp.Delivery, closed <-chan *amqp.Error, err error) {
	if err := c.declareLimited(conn, c.cfg.Queue, c.cfg.QueueArgs); err != nil {
		return nil, nil, nil, err
	}
	if err := c.declareLimited(conn, c.cfg.DeadLetterQueue, c.cfg.siblingArgs()); err != nil {
		return nil, nil, nil, err
	}
	ch, err = conn.Channel()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open channel: %w", err)
	}
	closed = ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Confirm(false); err != nil {
		return nil, nil, nil, fmt.Errorf("confirm mode: %w", err)
	}
	if err := c.declare(ch); err != nil {
		return nil, nil, nil, err
	}
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return nil, nil, nil, fmt.Errorf("set prefetch: %w", err)
	}
	deliveries, err = ch.Consume(c.cfg.Queue, c.cfg.ConsumerName, false, false, false, false, nil)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("consume %s: %w", c.cfg.Queue, err)
	}
	return ch, deliveries, closed, nil
}

// declare declares the queue and its bindings, the dead-letter queue and the retry queues, all
// durable. Declaring is idempotent, so it runs on every connect.
func (c *Consumer) declare(ch *amqp.Channel) error {
	q := c.cfg.Queue
	if _, err := ch.QueueDeclare(q, true, false, false, false, c.limitedArgs(q, c.cfg.QueueArgs)); err != nil {
		return fmt.Errorf("declare queue %s: %w", q, err)
	}
	for _, b := range c.cfg.Bindings {
		if err := declareExchange(ch, b); err != nil {
			return err
		}
		if err := ch.QueueBind(q, b.Key, b.Exchange, false, nil); err != nil {
			return fmt.Errorf("bind queue %s to %s with %q: %w", q, b.Exchange, b.Key, err)
		}
	}
	if err := c.declareDeadLetterQueue(ch); err != nil {
		return err
	}
	for _, d := range c.cfg.retryDelays() {
		name := c.cfg.retryQueue(d)
		if _, err := ch.QueueDeclare(name, true, false, false, false, c.cfg.retryArgs(d)); err != nil {
			return fmt.Errorf("declare retry queue %s: %w", name, err)
		}
	}
	return nil
}

// retryDelays lists the distinct delays of the retries. Each has its own retry queue with a
// fixed message TTL, so expiry is in order. Per-message TTLs expire only at the head of a queue.
func (c *Config) retryDelays() []time.Duration {
	var delays []time.Duration
	for attempt := 1; attempt < c.MaxAttempts; attempt++ {
		if d := c.retryDelay(attempt); !slices.Contains(delays, d) {
			delays = append(delays, d)
		}
	}
	return delays
}

// retryArgs makes a retry queue hold messages for d, then dead-letter them back to the queue.
// They go through the default exchange, so they reach this queue alone. Other queues bound to
// their first exchange do not get them.
//
// Beside a quorum queue they are quorum queues too, which dead-letter at least once. The broker
// keeps an expired message until Queue confirmed it, which needs overflow reject-publish.
func (c *Config) retryArgs(d time.Duration) amqp.Table {
	args := amqp.Table{
		"x-message-ttl":             d.Milliseconds(),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": c.Queue,
	}
	if c.quorum() {
		args["x-queue-type"] = "quorum"
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
	}
	return args
}

// quorum reports whether Queue is a quorum queue (QueueArgs has x-queue-type quorum). The
// partitions of a partitioned consumer are.
func (c *Config) quorum() bool {
	t, _ := c.QueueArgs["x-queue-type"].(string)
	return t == "quorum" || c.Partitions > 0 && t == ""
}

// declareDeadLetterQueue declares DeadLetterQueue on ch, with the arguments declareLimited chose.
func (c *Consumer) declareDeadLetterQueue(ch *amqp.Channel) error {
	q := c.cfg.DeadLetterQueue
	if _, err := ch.QueueDeclare(q, true, false, false, false, c.limitedArgs(q, c.cfg.siblingArgs())); err != nil {
		return fmt.Errorf("declare dead letter queue %s: %w", q, err)
	}
	return nil
}

// siblingArgs are the arguments of the dead-letter queue. It is of Queue's type, so that it is
// as available as Queue on a cluster.
func (c *Config) siblingArgs() amqp.Table {
	if c.quorum() {
		return amqp.Table{"x-queue-type": "quorum"}
	}
	return nil
}

// declareExchange declares a binding's exchange as walbox declares it, alternate exchange included.
func declareExchange(ch *amqp.Channel, b Binding) error {
	ae := b.AlternateExchange
	if ae == "" {
		ae = wire.DefaultAlternateExchange(b.Exchange)
	}
	var args amqp.Table
	if ae != "none" {
		if err := ch.ExchangeDeclare(ae, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare exchange %s: %w", ae, err)
		}
		args = amqp.Table{"alternate-exchange": ae}
	}
	if err := ch.ExchangeDeclare(b.Exchange, amqp.ExchangeTopic, true, false, false, false, args); err != nil {
		return fmt.Errorf("declare exchange %s: %w", b.Exchange, err)
	}
	return nil
}
