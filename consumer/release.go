package consumer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/wire"
)

// ErrNotHeld is returned by Release and Skip for an aggregate that holds nothing.
var ErrNotHeld = errors.New("aggregate holds no messages")

// Release lets the held messages of aggregateID go on. The failed one, first, gets MaxAttempts
// new attempts. The others follow in their order, before any new one. It runs
// the SQL function walbox_release(consumer, aggregate_id) and works from any process. The
// partition's holder handles them within its next poll.
func (c *Consumer) Release(ctx context.Context, aggregateID string) error {
	return c.release(ctx, aggregateID, false)
}

// Skip is Release that discards the failed message instead: it is never handled. It runs
// walbox_release(consumer, aggregate_id, true).
func (c *Consumer) Skip(ctx context.Context, aggregateID string) error {
	return c.release(ctx, aggregateID, true)
}

func (c *Consumer) release(ctx context.Context, aggregateID string, skip bool) error {
	var found bool
	if err := c.pool.QueryRow(ctx, c.psql.releaseFunc, c.cfg.ConsumerName, aggregateID, skip).Scan(&found); err != nil {
		return fmt.Errorf("release aggregate %q: %w", aggregateID, err)
	}
	if !found {
		return fmt.Errorf("release aggregate %q: %w", aggregateID, ErrNotHeld)
	}
	return nil
}

// HeldMessages counts the messages held for this consumer name, failed ones included: the
// gauge walbox_consumer_held_messages (consumermetrics.WatchHeld).
func (c *Consumer) HeldMessages(ctx context.Context) (int64, error) {
	var n int64
	if err := c.pool.QueryRow(ctx, c.psql.heldCount, c.cfg.ConsumerName).Scan(&n); err != nil {
		return 0, fmt.Errorf("count held messages: %w", err)
	}
	return n, nil
}

// headersJSON encodes a delivery's headers for a hold. A value JSON cannot hold, a NaN say,
// is kept as its text.
func headersJSON(h amqp.Table) []byte {
	out := make(map[string]any, len(h))
	for k, v := range h {
		if _, err := json.Marshal(v); err != nil {
			v = fmt.Sprint(v)
		}
		out[k] = v
	}
	b, err := json.Marshal(out)
	if err != nil {
		return []byte("{}")
	}
	return b
}

// headersOf decodes headersJSON's output. Numbers come back as wire.HeaderNumber makes them:
// whole ones as int64.
func headersOf(b []byte) map[string]any {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var h map[string]any
	if err := dec.Decode(&h); err != nil {
		return map[string]any{}
	}
	for k, v := range h {
		h[k] = wire.HeaderNumbers(v)
	}
	return h
}
