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
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, QueueArgs(queueType)); err != nil {
		return fmt.Errorf("declare queue: %w", err)
	}
	if err := ch.QueueBind(queue, EventRoutingKeys, exchange, false, nil); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	return nil
}
