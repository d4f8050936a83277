package orders_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/walbox/walbox/examples/orders"
)

func TestAmountAcceptsOnlyPositiveWholeCents(t *testing.T) {
	for _, in := range []string{"0", "-1", "29.99", "2999.0", "3e3", `"2999"`, "null", "9223372036854775808", "true"} {
		var a orders.Amount
		if err := json.Unmarshal([]byte(in), &a); !errors.Is(err, orders.ErrAmount) {
			t.Errorf("unmarshal %s: err %v, want ErrAmount", in, err)
		}
	}
	var a orders.Amount
	if err := json.Unmarshal([]byte("2999"), &a); err != nil || a.Cents() != 2999 {
		t.Fatalf("unmarshal 2999: %v, %d cents", err, a.Cents())
	}
	if out, _ := json.Marshal(a); string(out) != "2999" {
		t.Errorf("marshal: %s, want 2999", out)
	}
	for _, c := range []int64{0, -5} {
		if _, err := orders.NewAmount(c); !errors.Is(err, orders.ErrAmount) {
			t.Errorf("NewAmount(%d): err %v, want ErrAmount", c, err)
		}
	}
}
