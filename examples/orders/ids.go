package orders

import (
	"fmt"

	"github.com/google/uuid"
)

// OrderID identifies an order.
type OrderID struct{ uuid.UUID }

// CustomerID identifies a customer. It is a type of its own so that it cannot be passed where an
// OrderID is wanted.
type CustomerID struct{ uuid.UUID }

// NewOrderID returns a fresh, time-ordered order id.
func NewOrderID() (OrderID, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return OrderID{}, fmt.Errorf("generate order id: %w", err)
	}
	return OrderID{id}, nil
}

// ParseOrderID parses an order id in the canonical UUID form.
func ParseOrderID(s string) (OrderID, error) {
	id, err := parseUUID(s)
	return OrderID{id}, err
}

// ParseCustomerID parses a customer id in the canonical UUID form.
func ParseCustomerID(s string) (CustomerID, error) {
	id, err := parseUUID(s)
	return CustomerID{id}, err
}

// parseUUID accepts only the 36-character form and rejects the nil UUID.
func parseUUID(s string) (uuid.UUID, error) {
	if len(s) != 36 {
		return uuid.Nil, fmt.Errorf("%q: not a UUID", s)
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fmt.Errorf("%q: not a UUID", s)
	}
	if id == uuid.Nil {
		return uuid.Nil, fmt.Errorf("%q: the nil UUID", s)
	}
	return id, nil
}
