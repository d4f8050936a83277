package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/consumer/internal/handling"
)

// HeaderAggregateID is the header the relay sets to the outbox row's aggregate id. The
// partitions' exchange hashes it, and holds are per value of it.
const HeaderAggregateID = "aggregate_id"

// ErrHashExchangeMissing says the broker has no consistent-hash exchange: its plugin is off.
var ErrHashExchangeMissing = errors.New("partitions need the broker's consistent-hash exchange;" +
	" enable it with: rabbitmq-plugins enable rabbitmq_consistent_hash_exchange")

// ErrPartitionsChanged says Config.Partitions differs from the count the consumer's leases
// record. Changing it moves aggregates between queues; docs/outbox.md says how.
var ErrPartitionsChanged = errors.New("partitions changed")

// hashExchange names the exchange that spreads Queue's messages over its partitions.
func (c *Config) hashExchange() string { return c.Queue + ".hash" }

// partitionQueue names partition p's queue.
func (c *Config) partitionQueue(p int) string { return fmt.Sprintf("%s.p%d", c.Queue, p) }

// partitionArgs are the arguments of every partition queue: QueueArgs, a quorum queue, one
// active consumer at a time. There is no delivery limit unless QueueArgs sets one.
func (c *Config) partitionArgs() amqp.Table {
	args := amqp.Table(maps.Clone(c.QueueArgs))
	if args == nil {
		args = amqp.Table{}
	}
	args["x-queue-type"] = "quorum"
	args["x-single-active-consumer"] = true
	if _, ok := args["x-delivery-limit"]; !ok {
		args["x-delivery-limit"] = noDeliveryLimit
	}
	return args
}

// declarePartitions declares the hash exchange and binds it from each binding's exchange. It
// declares and binds the partition queues, and declares the dead-letter queue. Each partition has weight
// 1, bound in partition order.
func (c *Consumer) declarePartitions(ch *amqp.Channel) error {
	hx := c.cfg.hashExchange()
	args := amqp.Table{"hash-header": HeaderAggregateID}
	if err := ch.ExchangeDeclare(hx, "x-consistent-hash", true, false, false, false, args); err != nil {
		return hashExchangeError(hx, err)
	}
	for _, b := range c.cfg.Bindings {
		if err := declareExchange(ch, b); err != nil {
			return err
		}
		if err := ch.ExchangeBind(hx, b.Key, b.Exchange, false, nil); err != nil {
			return fmt.Errorf("bind exchange %s to %s with %q: %w", hx, b.Exchange, b.Key, err)
		}
	}
	for p := range c.cfg.Partitions {
		q := c.cfg.partitionQueue(p)
		if _, err := ch.QueueDeclare(q, true, false, false, false, c.cfg.partitionArgs()); err != nil {
			return fmt.Errorf("declare partition queue %s: %w", q, err)
		}
		if err := ch.QueueBind(q, "1", hx, false, nil); err != nil {
			return fmt.Errorf("bind partition queue %s to %s: %w", q, hx, err)
		}
	}
	return c.declareDeadLetterQueue(ch)
}

// hashExchangeError names the plugin when the broker knows no x-consistent-hash exchange. It
// answers such a declare with 503 COMMAND_INVALID, "invalid exchange type".
func hashExchangeError(name string, err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.CommandInvalid && strings.Contains(ae.Reason, "exchange type") {
		return &handling.FatalError{Err: fmt.Errorf("declare exchange %s: %w (broker: %s)", name, ErrHashExchangeMissing, ae.Reason)}
	}
	return fmt.Errorf("declare exchange %s: %w", name, err)
}

// topology declares the partitions' topology on a connection of its own. It retries until it
// succeeds, ctx ends or the error is fatal.
func (c *Consumer) topology(ctx context.Context) error {
	backoff := c.cfg.ReconnectBackoff
	for {
		err := c.checkPartitions(ctx)
		if err == nil {
			err = c.withChannel(ctx, c.cfg.ConsumerName+" topology", func(conn *amqp.Connection, ch *amqp.Channel) error {
				if err := c.declareLimited(conn, c.cfg.DeadLetterQueue, c.cfg.siblingArgs()); err != nil {
					return err
				}
				return c.declarePartitions(ch)
			})
		}
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case Fatal(err):
			return err
		}
		c.report(err)
		if !handling.Sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, c.cfg.ReconnectBackoffMax)
	}
}

// checkPartitions compares Partitions with the leases in the database. It runs before any
// declare: a new count would change the hash ring at once.
func (c *Consumer) checkPartitions(ctx context.Context) error {
	var known int
	if err := c.pool.QueryRow(ctx, c.psql.leaseCount, c.cfg.ConsumerName).Scan(&known); err != nil {
		return leaseError(handling.ClassifyDB(err))
	}
	if known != 0 && known != c.cfg.Partitions {
		return &handling.FatalError{Err: fmt.Errorf("consumer %s: %w: Partitions is %d, the leases in the database are of %d"+
			" (see Partitions in docs/outbox.md)", c.cfg.ConsumerName, ErrPartitionsChanged, c.cfg.Partitions, known)}
	}
	return nil
}

// withChannel dials the broker, opens a channel, runs f on it and closes the connection.
func (c *Consumer) withChannel(ctx context.Context, name string, f func(*amqp.Connection, *amqp.Channel) error) error {
	var nc netConn
	defer context.AfterFunc(ctx, nc.close)()
	defer nc.close()
	conn, err := amqp.DialConfig(c.cfg.AMQPURL, amqp.Config{
		Dial:       nc.dialer(ctx),
		Properties: amqp.Table{"connection_name": name},
	})
	if err != nil {
		return fmt.Errorf("dial broker: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	return f(conn, ch)
}
