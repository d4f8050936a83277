package orders

import "time"

// Status is where an order is in its life.
type Status string

// Statuses an order can have (the orders table checks them).
const (
	StatusCreated   Status = "created"
	StatusPaid      Status = "paid"
	StatusCancelled Status = "cancelled"
)

// Order is one row of the orders table.
type Order struct {
	ID         OrderID    `json:"id"`
	CustomerID CustomerID `json:"customer_id"`
	Amount     Amount     `json:"amount_cents"`
	Status     Status     `json:"status"`
	CreatedAt  time.Time  `json:"created_at"`
}

// Event types and the aggregate type of the messages this package writes.
const (
	AggregateType = "order"
	EventCreated  = "order.created"
	EventPaid     = "order.paid"
	// EventPaymentReminder is scheduled at creation (PaymentReminder); the payment cancels it.
	EventPaymentReminder = "order.payment_reminder"
	EventRoutingKeys     = "order.*" // binds a queue to every order event
)

// Created is the payload of an order.created message.
type Created struct {
	OrderID     OrderID    `json:"order_id"`
	CustomerID  CustomerID `json:"customer_id"`
	AmountCents int64      `json:"amount_cents"`
}
