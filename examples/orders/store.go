package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walbox/walbox/outbox"
)

// ErrNotFound is returned by Get for an unknown order.
var ErrNotFound = errors.New("order not found")

// Store keeps orders in PostgreSQL.
type Store struct {
	pool     *pgxpool.Pool
	emit     bool
	reminder time.Duration // 0: no payment reminder
}

// StoreOption configures a Store.
type StoreOption func(*Store)

// EmitMessages makes the Store write each order's message without an outbox row, through
// walbox_emit (outbox.Emit), instead of into the outbox table.
func EmitMessages() StoreOption { return func(s *Store) { s.emit = true } }

// PaymentReminder makes Create schedule an order.payment_reminder message, due after d. Pay
// cancels it in the payment's transaction (outbox.Cancel).
func PaymentReminder(d time.Duration) StoreOption { return func(s *Store) { s.reminder = d } }

// NewStore returns a Store on pool. The orders table must exist (Migrate).
func NewStore(pool *pgxpool.Pool, opts ...StoreOption) *Store {
	s := &Store{pool: pool}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// Create writes a new order and its order.created outbox message in one transaction: both
// are committed, or neither is.
func (s *Store) Create(ctx context.Context, customer CustomerID, amount Amount) (Order, error) {
	if amount.IsZero() {
		return Order{}, fmt.Errorf("create order: amount: %w", ErrAmount)
	}
	id, err := NewOrderID()
	if err != nil {
		return Order{}, err
	}
	o := Order{ID: id, CustomerID: customer, Amount: amount, Status: StatusCreated}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return s.insert(ctx, tx, &o) })
	if err != nil {
		return Order{}, fmt.Errorf("create order: %w", err)
	}
	return o, nil
}

// insert writes o and its outbox message within tx and sets o.CreatedAt.
func (s *Store) insert(ctx context.Context, tx pgx.Tx, o *Order) error {
	err := tx.QueryRow(ctx, `INSERT INTO orders (id, customer_id, amount_cents, status)
		VALUES ($1, $2, $3, $4) RETURNING created_at`,
		o.ID.UUID, o.CustomerID.UUID, o.Amount.Cents(), string(o.Status)).Scan(&o.CreatedAt)
	if err != nil {
		return fmt.Errorf("insert order: %w", err)
	}
	msg, err := message(o, EventCreated)
	if err != nil {
		return err
	}
	msgs := []outbox.Message{msg}
	if s.reminder > 0 {
		if msg, err = s.reminderMessage(ctx, tx, o); err != nil {
			return err
		}
		msgs = append(msgs, msg)
	}
	return s.write(ctx, tx, msgs...)
}

// write writes msgs into the outbox, as rows or through walbox_emit.
func (s *Store) write(ctx context.Context, tx pgx.Tx, msgs ...outbox.Message) error {
	write := outbox.Write
	if s.emit {
		write = outbox.Emit
	}
	if err := write(ctx, tx, msgs...); err != nil {
		return fmt.Errorf("write outbox: %w", err)
	}
	return nil
}

// reminderMessage is o's order.payment_reminder, due s.reminder after its creation. Its id is kept
// with the order, for Pay to cancel it.
func (s *Store) reminderMessage(ctx context.Context, tx pgx.Tx, o *Order) (outbox.Message, error) {
	m, err := message(o, EventPaymentReminder)
	if err != nil {
		return m, err
	}
	if m.ID, err = uuid.NewV7(); err != nil {
		return m, err
	}
	m.DeliverAt = o.CreatedAt.Add(s.reminder)
	if _, err := tx.Exec(ctx, "UPDATE orders SET reminder_id = $2 WHERE id = $1", o.ID.UUID, m.ID); err != nil {
		return m, fmt.Errorf("keep the reminder's id: %w", err)
	}
	return m, nil
}

// Pay marks a created order paid and writes order.paid, in one transaction. It cancels the order's
// payment reminder in the same transaction, and reports whether the reminder was still waiting.
func (s *Store) Pay(ctx context.Context, id OrderID) (o Order, reminderCancelled bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var reminder *uuid.UUID
		var cents int64
		err := tx.QueryRow(ctx, `UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'created'
			RETURNING customer_id, amount_cents, created_at, reminder_id`, id.UUID).Scan(&o.CustomerID.UUID, &cents, &o.CreatedAt, &reminder)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("update order: %w", err)
		}
		o.ID, o.Status = id, StatusPaid
		if o.Amount, err = NewAmount(cents); err != nil {
			return err
		}
		if reminder != nil {
			if reminderCancelled, err = outbox.Cancel(ctx, tx, *reminder); err != nil {
				return err
			}
		}
		msg, err := message(&o, EventPaid)
		if err != nil {
			return err
		}
		return s.write(ctx, tx, msg)
	})
	if err != nil {
		return Order{}, false, fmt.Errorf("pay order %s: %w", id, err)
	}
	return o, reminderCancelled, nil
}

// message is the message of eventType about o: order.created, order.paid, order.payment_reminder.
func message(o *Order, eventType string) (outbox.Message, error) {
	payload, err := json.Marshal(Created{OrderID: o.ID, CustomerID: o.CustomerID, AmountCents: o.Amount.Cents()})
	if err != nil {
		return outbox.Message{}, fmt.Errorf("encode payload: %w", err)
	}
	return outbox.Message{
		AggregateType: AggregateType,
		AggregateID:   o.ID.String(),
		EventType:     eventType,
		Payload:       payload,
	}, nil
}

// Get returns the order with the given id, or ErrNotFound.
func (s *Store) Get(ctx context.Context, id OrderID) (Order, error) {
	o := Order{ID: id}
	var cents int64
	var status string
	err := s.pool.QueryRow(ctx, `SELECT customer_id, amount_cents, status, created_at
		FROM orders WHERE id = $1`, id.UUID).Scan(&o.CustomerID.UUID, &cents, &status, &o.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, ErrNotFound
	}
	if err != nil {
		return Order{}, fmt.Errorf("get order %s: %w", id, err)
	}
	if o.Amount, err = NewAmount(cents); err != nil {
		return Order{}, fmt.Errorf("get order %s: %w", id, err)
	}
	o.Status = Status(status)
	return o, nil
}
