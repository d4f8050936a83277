package consumer_test

import (
	"context"
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/migrations"
)

func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, "postgres://billing@localhost/billing")
	if err != nil {
		return
	}
	defer pool.Close()
	// Once, at deployment: the table of processed message ids.
	if err := pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error { return migrations.ApplyConsumer(ctx, c.Conn()) }); err != nil {
		return
	}

	c, err := consumer.New(pool, consumer.Config{
		AMQPURL:  "amqp://billing:secret@localhost:5672/",
		Queue:    "billing.orders",
		Bindings: []consumer.Binding{{Exchange: "outbox", Key: "order.*"}},
		OnError:  func(err error) { slog.Warn("consumer", "err", err) },
	}, func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
		// Writes through tx commit once per message id, with the record that it was handled.
		_, err := tx.Exec(ctx, "INSERT INTO invoices (order_event, body) VALUES ($1, $2)", d.MessageID, d.Body)
		return err
	})
	if err != nil {
		return
	}
	if err := c.Run(ctx); err != nil {
		slog.Error("consumer stopped", "err", err)
	}
}
