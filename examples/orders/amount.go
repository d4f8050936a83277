package orders

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// ErrAmount is returned for an amount that is not a positive whole number of cents.
var ErrAmount = errors.New("must be a positive whole number of cents")

// Amount is a sum of money in whole cents, always positive. Only NewAmount and UnmarshalJSON
// create one; the zero value means "no amount" and is rejected by Store.Create.
type Amount struct{ cents int64 }

// NewAmount returns cents as an Amount; zero and negative sums are rejected.
func NewAmount(cents int64) (Amount, error) {
	if cents <= 0 {
		return Amount{}, fmt.Errorf("%d: %w", cents, ErrAmount)
	}
	return Amount{cents: cents}, nil
}

// Cents returns the amount in cents (0 for the zero value).
func (a Amount) Cents() int64 { return a.cents }

// IsZero reports whether a is the zero value, which holds no amount.
func (a Amount) IsZero() bool { return a.cents == 0 }

// MarshalJSON encodes a as an integer number of cents.
func (a Amount) MarshalJSON() ([]byte, error) {
	return strconv.AppendInt(nil, a.cents, 10), nil
}

// UnmarshalJSON accepts only a JSON integer greater than zero: 2999, not 29.99, 2999.0, 3e3,
// "2999", 0 or -1.
func (a *Amount) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if bytes.ContainsAny(data, ".eE\"") || bytes.Equal(data, []byte("null")) {
		return fmt.Errorf("%s: %w", data, ErrAmount)
	}
	n, err := strconv.ParseInt(string(data), 10, 64)
	if err != nil {
		return fmt.Errorf("%.20s: %w", data, ErrAmount)
	}
	v, err := NewAmount(n)
	if err != nil {
		return err
	}
	*a = v
	return nil
}
