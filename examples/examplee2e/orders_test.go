package examplee2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/uuid"

	"github.com/walbox/walbox/examples/orders"
	"github.com/walbox/walbox/internal/testenv"
)

// An order and its outbox message are written in one transaction: both or neither.
func TestOrderAndOutboxRowCommitTogether(t *testing.T) {
	s := newSystem(t, testenv.SharedRabbit(t))
	customer := uuid.NewString()
	o := s.placeOrder(customer, 2999)

	got, err := orders.NewStore(s.pool).Get(context.Background(), o.ID)
	if err != nil {
		t.Fatalf("get order: %v", err)
	}
	if got.CustomerID.String() != customer || got.Amount.Cents() != 2999 || got.Status != orders.StatusCreated {
		t.Errorf("order row %+v, want customer %s, 2999 cents, created", got, customer)
	}
	var aggType, eventType string
	var payload []byte
	err = s.pool.QueryRow(context.Background(),
		"SELECT aggregate_type, event_type, payload FROM outbox WHERE aggregate_id = $1", o.ID.String()).
		Scan(&aggType, &eventType, &payload)
	if err != nil {
		t.Fatalf("outbox row of order %s: %v", o.ID, err)
	}
	if aggType != "order" || eventType != "order.created" {
		t.Errorf("outbox row is %s/%s, want order/order.created", aggType, eventType)
	}
	checkPayload(t, payload, o)

	t.Run("a failure mid-transaction writes neither row", func(t *testing.T) {
		// The outbox insert fails after the order row was inserted in the same transaction.
		for _, sql := range []string{
			`CREATE FUNCTION fail_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
			 BEGIN RAISE EXCEPTION 'outbox unavailable'; END $$`,
			`CREATE TRIGGER fail_outbox BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION fail_outbox()`,
		} {
			if _, err := s.pool.Exec(context.Background(), sql); err != nil {
				t.Fatal(err)
			}
		}
		status, body := s.post(`{"customer_id": "` + uuid.NewString() + `", "amount_cents": 100}`)
		if status != http.StatusInternalServerError {
			t.Fatalf("status %d (%v), want 500", status, body)
		}
		if n := s.count("SELECT count(*) FROM orders"); n != 1 {
			t.Errorf("%d orders, want only the first: the failed one was committed", n)
		}
		if n := s.count("SELECT count(*) FROM outbox"); n != 1 {
			t.Errorf("%d outbox rows, want 1", n)
		}
	})
}

// checkPayload compares an order.created payload with the order it announces.
func checkPayload(t *testing.T, payload []byte, o orders.Order) {
	t.Helper()
	var got map[string]any
	if err := json.Unmarshal(payload, &got); err != nil {
		t.Fatalf("payload %s: %v", payload, err)
	}
	want := map[string]any{"order_id": o.ID.String(), "customer_id": o.CustomerID.String(),
		"amount_cents": float64(o.Amount.Cents())}
	if len(got) != len(want) {
		t.Errorf("payload %s, want exactly %v", payload, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("payload %s: %s = %v, want %v", payload, k, got[k], v)
		}
	}
}

func TestBadOrderRequestsNameTheFieldAndWriteNothing(t *testing.T) {
	s := newSystem(t, testenv.SharedRabbit(t))
	customer := uuid.NewString()
	tests := []struct {
		name, body, field string
	}{
		{"malformed JSON", `{"customer_id": `, "body"},
		{"not an object", `[1, 2]`, "body"},
		{"two objects", `{"customer_id": "` + customer + `", "amount_cents": 1} {}`, "body"},
		{"unknown field", `{"customer_id": "` + customer + `", "amount_cents": 1, "coupon": "x"}`, "coupon"},
		{"missing customer_id", `{"amount_cents": 2999}`, "customer_id"},
		{"null customer_id", `{"customer_id": null, "amount_cents": 2999}`, "customer_id"},
		{"malformed customer_id", `{"customer_id": "42", "amount_cents": 2999}`, "customer_id"},
		{"customer_id not a string", `{"customer_id": 42, "amount_cents": 2999}`, "customer_id"},
		{"nil customer_id", `{"customer_id": "00000000-0000-0000-0000-000000000000", "amount_cents": 1}`, "customer_id"},
		{"missing amount", `{"customer_id": "` + customer + `"}`, "amount_cents"},
		{"zero amount", `{"customer_id": "` + customer + `", "amount_cents": 0}`, "amount_cents"},
		{"negative amount", `{"customer_id": "` + customer + `", "amount_cents": -5}`, "amount_cents"},
		{"fractional amount", `{"customer_id": "` + customer + `", "amount_cents": 29.99}`, "amount_cents"},
		{"integral amount with a fraction part", `{"customer_id": "` + customer + `", "amount_cents": 2999.0}`, "amount_cents"},
		{"amount in exponent form", `{"customer_id": "` + customer + `", "amount_cents": 3e3}`, "amount_cents"},
		{"amount as a string", `{"customer_id": "` + customer + `", "amount_cents": "2999"}`, "amount_cents"},
		{"amount beyond int64", `{"customer_id": "` + customer + `", "amount_cents": 9223372036854775808}`, "amount_cents"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, got := s.post(tt.body)
			if status != http.StatusBadRequest {
				t.Fatalf("status %d (%v), want 400", status, got)
			}
			if got["field"] != tt.field {
				t.Errorf("field %v, want %q (error %v)", got["field"], tt.field, got["error"])
			}
			if msg, _ := got["error"].(string); msg == "" {
				t.Errorf("no error message in %v", got)
			}
		})
	}
	if n := s.count("SELECT count(*) FROM orders"); n != 0 {
		t.Errorf("%d orders written by rejected requests", n)
	}
	if n := s.count("SELECT count(*) FROM outbox"); n != 0 {
		t.Errorf("%d outbox rows written by rejected requests", n)
	}
}
