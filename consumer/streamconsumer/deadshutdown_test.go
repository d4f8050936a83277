package streamconsumer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/consumer/streamconsumer"
)

// A shutdown that comes once the last attempt failed still moves the offset past the message
// it dead-letters. Otherwise the next run handles a message the consumer already gave up on.
func TestStreamConsumerShutdownAfterADeadLetterMovesTheOffset(t *testing.T) {
	se := newStreamEnv(t, 1)
	cfg := se.config()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.OnError = func(err error) {
		var me *consumer.MessageError
		if errors.As(err, &me) && me.Attempt == 3 {
			cancel() // the shutdown comes after the last attempt, before the dead letter
		}
	}
	c, err := streamconsumer.New(se.pool, cfg, func(context.Context, pgx.Tx, consumer.Delivery) error {
		return errors.New("poison")
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	dead := readAll(t, se.uri, se.stream+".dead", 1)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	next := se.count(t, "SELECT COALESCE(pg_catalog.max(next_offset), 0) FROM walbox_stream_offsets WHERE consumer = 'billing'")
	if next != 1 {
		t.Errorf("stored offset %d after the dead letter was confirmed, want 1", next)
	}
	se.runUntil(t, se.config(), recordEffect, 1)
	if got := se.count(t, "SELECT count(*) FROM effects"); got != 0 {
		t.Errorf("the dead-lettered message was handled %d times by the next run, want 0", got)
	}
}
