package consumer

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrNoDeliveryLimit warns that a quorum queue exists without x-delivery-limit. RabbitMQ 4.0
// then drops a message returned more than 20 times. Run reports it to OnError, with the fix, and goes on.
var ErrNoDeliveryLimit = errors.New("quorum queue without x-delivery-limit:" +
	" RabbitMQ 4.0 drops a message returned more than 20 times (after lost connections, say)")

// noDeliveryLimit is the delivery limit of the consumer's quorum queues, in effect none. RabbitMQ
// 4.0 drops a quorum queue's message after 20 returns by default. A closed channel returns its
// unacknowledged messages. The value minus one means none on 4.0, but 3.10 then drops every
// returned message.
const noDeliveryLimit = int64(1<<31 - 1)

// limitedArgs are the arguments the session declares queue with: withLimit's, unless
// declareLimited found queue existing without a limit.
func (c *Consumer) limitedArgs(queue string, args map[string]any) amqp.Table {
	if _, limitless := c.limitless.Load(queue); limitless {
		return amqp.Table(args)
	}
	return withLimit(args)
}

// withLimit adds x-delivery-limit noDeliveryLimit to the arguments of a quorum queue. It leaves
// a limit args set, and other queue types.
func withLimit(args map[string]any) amqp.Table {
	t, _ := args["x-queue-type"].(string)
	if _, set := args["x-delivery-limit"]; t != "quorum" || set {
		return amqp.Table(args)
	}
	out := amqp.Table(maps.Clone(args))
	out["x-delivery-limit"] = noDeliveryLimit
	return out
}

// declareLimited declares queue withLimit, on a channel of its own. RabbitMQ refuses another
// x-delivery-limit for an existing queue, closing the channel. Then it declares the queue as it
// exists, and reports ErrNoDeliveryLimit once. It tries the limit again every session: the queue
// may have been declared anew.
func (c *Consumer) declareLimited(conn *amqp.Connection, queue string, args map[string]any) error {
	err := declareOn(conn, queue, withLimit(args))
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed || !strings.Contains(ae.Reason, "'x-delivery-limit'") {
		if err == nil {
			c.limitless.Delete(queue)
		}
		return err
	}
	if err := declareOn(conn, queue, amqp.Table(args)); err != nil {
		return err
	}
	c.limitless.Store(queue, true)
	if _, warned := c.warnedLimit.LoadOrStore(queue, true); !warned {
		c.report(fmt.Errorf("queue %s: %w; set a policy on it: rabbitmqctl set_policy %s-delivery-limit '^%s$' '{\"delivery-limit\":%d}' --apply-to queues",
			queue, ErrNoDeliveryLimit, queue, regexp.QuoteMeta(queue), noDeliveryLimit))
	}
	return nil
}

// declareOn declares queue durable with args on a channel of its own, and closes it.
func declareOn(conn *amqp.Connection, queue string, args amqp.Table) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		return fmt.Errorf("declare queue %s: %w", queue, err)
	}
	return nil
}
