// Command notifier is the example notification service: it consumes order events relayed by
// walbox from a durable queue and records, once per message, the notification it would send.
//
// Environment: NOTIFIER_DATABASE_URL, NOTIFIER_AMQP_URL (both required), NOTIFIER_EXCHANGE
// (default outbox), NOTIFIER_QUEUE (default notifications), NOTIFIER_QUEUE_TYPE (classic, the
// default, or quorum for a cluster: the retry and dead-letter queues follow), NOTIFIER_PARTITIONS
// (default 0: one queue; N spreads it over N partition queues, shared by every notifier process,
// each order's events in order). SIGINT or SIGTERM stops it after the message in hand.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/examples/orders"
	"github.com/walbox/walbox/migrations"
)

type config struct {
	databaseURL, amqpURL, exchange, queue, queueType string
	partitions                                       int
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := parseConfig(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "notifier:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

func parseConfig(getenv func(string) string) (config, error) {
	cfg := config{
		databaseURL: getenv("NOTIFIER_DATABASE_URL"),
		amqpURL:     getenv("NOTIFIER_AMQP_URL"),
		exchange:    envOr(getenv, "NOTIFIER_EXCHANGE", "outbox"),
		queue:       envOr(getenv, "NOTIFIER_QUEUE", "notifications"),
		queueType:   envOr(getenv, "NOTIFIER_QUEUE_TYPE", "classic"),
	}
	if v := getenv("NOTIFIER_PARTITIONS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > consumer.MaxPartitions {
			return config{}, fmt.Errorf("NOTIFIER_PARTITIONS: %q: want 0 to %d", v, consumer.MaxPartitions)
		}
		cfg.partitions = n
	}
	switch {
	case cfg.databaseURL == "":
		return config{}, errors.New("NOTIFIER_DATABASE_URL: required")
	case cfg.amqpURL == "":
		return config{}, errors.New("NOTIFIER_AMQP_URL: required")
	case cfg.queueType != "classic" && cfg.queueType != "quorum":
		return config{}, fmt.Errorf("NOTIFIER_QUEUE_TYPE: %q: want classic or quorum", cfg.queueType)
	}
	return cfg, nil
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// run consumes until ctx ends.
func run(ctx context.Context, cfg config, log *slog.Logger) error {
	pool, err := pgxpool.New(ctx, cfg.databaseURL)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer pool.Close()
	if err := migrate(ctx, pool); err != nil {
		return err
	}
	ccfg := orders.ConsumerConfig(cfg.amqpURL, cfg.queue, cfg.queueType)
	if cfg.partitions > 0 {
		ccfg = orders.PartitionedConfig(cfg.amqpURL, cfg.exchange, cfg.queue, cfg.partitions)
	} else if err := orders.BindQueue(ctx, cfg.amqpURL, cfg.exchange, cfg.queue, cfg.queueType); err != nil {
		return err
	}
	ccfg.OnError = func(err error) { log.Warn("consumer", "err", err) }
	c, err := consumer.New(pool, ccfg, orders.NotificationHandler(log))
	if err != nil {
		return err
	}
	log.Info("consuming", "queue", cfg.queue, "exchange", cfg.exchange, "partitions", cfg.partitions)
	return c.Run(ctx)
}

// migrate creates the processed-messages and notifications tables.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Release()
	if err := migrations.ApplyConsumer(ctx, conn.Conn()); err != nil {
		return fmt.Errorf("apply consumer migrations: %w", err)
	}
	return orders.MigrateNotifications(ctx, conn)
}
