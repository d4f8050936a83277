package outbox_test

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walbox/walbox/outbox"
)

// Write the event in the transaction that changes the state it reports: both commit, or neither.
func ExampleWrite() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@localhost/shop")
	if err != nil {
		return
	}
	defer pool.Close()

	// A W3C traceparent in ctx lands in every message's headers.
	ctx = outbox.WithTraceparent(ctx, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE orders SET status = 'paid' WHERE id = $1", 42); err != nil {
			return err
		}
		return outbox.Write(ctx, tx, outbox.Message{
			AggregateType: "order",
			AggregateID:   "42",
			EventType:     "order.paid",
			Payload:       []byte(`{"order_id": 42, "amount": "19.90"}`),
		})
	})
	_ = err
}

// Retention mode: the relay still publishes every message, and the table stays empty.
func ExampleDeleteAfterInsert() {
	w := outbox.NewWriter(outbox.Table{Schema: "billing", Name: "outbox"}, outbox.DeleteAfterInsert())
	_ = w // w.Write(ctx, tx, msgs...)
}
