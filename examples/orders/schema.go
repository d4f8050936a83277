package orders

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// execer is what the schema functions need: a pool, a connection or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

const ordersSchema = `
CREATE TABLE IF NOT EXISTS orders (
    id           uuid        PRIMARY KEY,
    customer_id  uuid        NOT NULL,
    amount_cents bigint      NOT NULL CHECK (amount_cents > 0),
    status       text        NOT NULL CHECK (status IN ('created', 'paid', 'cancelled')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    reminder_id  uuid        -- the scheduled order.payment_reminder message, if any
)`

const notificationsSchema = `
CREATE TABLE IF NOT EXISTS notifications (
    message_id   text        PRIMARY KEY,
    order_id     uuid        NOT NULL,
    customer_id  uuid        NOT NULL,
    amount_cents bigint      NOT NULL,
    sent_at      timestamptz NOT NULL DEFAULT now()
)`

// Migrate creates the orders table if it does not exist. The outbox table comes from
// `walbox migrate`.
func Migrate(ctx context.Context, db execer) error {
	if _, err := db.Exec(ctx, ordersSchema); err != nil {
		return fmt.Errorf("create orders table: %w", err)
	}
	if _, err := db.Exec(ctx, "ALTER TABLE orders ADD COLUMN IF NOT EXISTS reminder_id uuid"); err != nil {
		return fmt.Errorf("add orders.reminder_id: %w", err)
	}
	return nil
}

// MigrateNotifications creates the notifications table if it does not exist.
func MigrateNotifications(ctx context.Context, db execer) error {
	if _, err := db.Exec(ctx, notificationsSchema); err != nil {
		return fmt.Errorf("create notifications table: %w", err)
	}
	return nil
}
