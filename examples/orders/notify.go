package orders

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/consumer"
)

// NotificationHandler returns a consumer handler that records the notification for each
// order.created and order.payment_reminder message in the notifications table. It does so within
// the consumer's transaction, and logs the notification it would send. Other event types are
// acknowledged and ignored.
func NotificationHandler(log *slog.Logger) consumer.Handler {
	return func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		if d.Type != EventCreated && d.Type != EventPaymentReminder {
			return nil
		}
		var c Created
		if err := json.Unmarshal(d.Body, &c); err != nil {
			return fmt.Errorf("decode %s payload: %w", d.Type, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO notifications (message_id, order_id, customer_id, amount_cents)
			VALUES ($1, $2, $3, $4)`, d.MessageID, c.OrderID.UUID, c.CustomerID.UUID, c.AmountCents); err != nil {
			return fmt.Errorf("insert notification: %w", err)
		}
		log.Info("notify customer: "+d.Type, "msg_id", d.MessageID, "order_id", c.OrderID,
			"customer_id", c.CustomerID, "amount_cents", c.AmountCents)
		return nil
	}
}

// ConsumerConfig is the consumer configuration of the notification service: the durable queue
// that BindQueue binds to every order event, of queueType ("" or "classic", or "quorum": then its
// retry and dead-letter queues are quorum queues too).
//
// It sets no Bindings: the consumer would declare the exchange without the alternate-exchange
// argument the relay declares it with, and the broker refuses the mismatch (PRECONDITION_FAILED).
func ConsumerConfig(amqpURL, queue, queueType string) consumer.Config {
	return consumer.Config{AMQPURL: amqpURL, Queue: queue, QueueArgs: QueueArgs(queueType)}
}

// PartitionedConfig is the notification service's configuration with partitions: the events of
// one order go to one of n partition queues, and each order's are handled in order. Several
// notifier processes share the partitions. The consumer binds its hash exchange to exchange.
// It declares exchange as the relay does, with its default alternate exchange, so either may
// start first.
func PartitionedConfig(amqpURL, exchange, queue string, n int) consumer.Config {
	return consumer.Config{
		AMQPURL:    amqpURL,
		Queue:      queue,
		Bindings:   []consumer.Binding{{Exchange: exchange, Key: EventRoutingKeys}},
		Partitions: n,
	}
}

// QueueArgs are the arguments of a queue of queueType: none for "" or "classic" (the broker's
// default type, as queues declared before this setting existed have).
func QueueArgs(queueType string) map[string]any {
	if queueType == "" || queueType == "classic" {
		return nil
	}
	return map[string]any{"x-queue-type": queueType}
}
