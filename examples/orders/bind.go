package orders

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// BindQueue declares queue (durable, as the consumer declares it) and binds it to every order
// event on exchange. The exchange is the relay's: BindQueue never declares it, and retries
// until it exists or ctx ends.
func BindQueue(ctx context.Context, amqpURL, exchange, queue, queueType string) error {
	for {
		err := bindOnce(amqpURL, exchange, queue, queueType)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bind queue %s to %s: %w (last error: %v)", queue, exchange, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func bindOnce(amqpURL, exchange, queue, queueType string) error {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		return fmt.Errorf("connect to broker: %w", err)
	}
	defer conn.Close()
	ch, err := declareQueue(conn, queue, queueType)
	if err != nil {
		return err
	}
	if err := ch.QueueBind(queue, EventRoutingKeys, exchange, false, nil); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	return nil
}

// declareQueue declares queue as the consumer does. A new quorum queue gets x-delivery-limit
// 2147483647: RabbitMQ 4.0 drops a message returned more than 20 times by default. The broker
// refuses to add it to an existing queue, which keeps its arguments; the consumer then warns.
func declareQueue(conn *amqp.Connection, queue, queueType string) (*amqp.Channel, error) {
	tries := []amqp.Table{QueueArgs(queueType)}
	if queueType == "quorum" {
		tries = append([]amqp.Table{{"x-queue-type": "quorum", "x-delivery-limit": int64(1<<31 - 1)}}, tries...)
	}
	var err error
	for _, args := range tries {
		ch, cerr := conn.Channel() // a refused declare closes the channel
		if cerr != nil {
			return nil, fmt.Errorf("open channel: %w", cerr)
		}
		if _, err = ch.QueueDeclare(queue, true, false, false, false, args); err == nil {
			return ch, nil
		}
	}
	return nil, fmt.Errorf("declare queue: %w", err)
}
