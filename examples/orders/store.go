package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walbox/walbox/outbox"
)

// ErrNotFound is returned by Get for an unknown order.
var ErrNotFound = errors.New("order not found")

// Store keeps orders in PostgreSQL.
type Store struct {
	pool *pgxpool.Pool
	emit bool
}

// StoreOption configures a Store.
type StoreOption func(*Store)

// EmitMessages makes the Store write each order's message without an outbox row, through
// walbox_emit (outbox.Emit), instead of into the outbox table.
func EmitMessages() StoreOption { return func(s *Store) { s.emit = true } }

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
	msg, err := createdMessage(o)
	if err != nil {
		return err
	}
	write := outbox.Write
	if s.emit {
		write = outbox.Emit
	}
	if err := write(ctx, tx, msg); err != nil {
		return fmt.Errorf("write outbox: %w", err)
	}
	return nil
}

// createdMessage is the order.created message announcing o.
func createdMessage(o *Order) (outbox.Message, error) {
	payload, err := json.Marshal(Created{OrderID: o.ID, CustomerID: o.CustomerID, AmountCents: o.Amount.Cents()})
	if err != nil {
		return outbox.Message{}, fmt.Errorf("encode payload: %w", err)
	}
	return outbox.Message{
		AggregateType: AggregateType,
		AggregateID:   o.ID.String(),
		EventType:     EventCreated,
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
