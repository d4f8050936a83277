package consumer

import (
	"math"
	"reflect"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A held message's headers come back as the handler saw them on delivery: strings, whole
// numbers as int64, nested tables. A value JSON cannot hold comes back as its text.
func TestHeldHeadersRoundTrip(t *testing.T) {
	h := amqp.Table{
		"aggregate_id": "42",
		"n":            int64(5),
		"small":        int32(7),
		"f":            1.5,
		"ok":           true,
		"nested":       amqp.Table{"a": int64(1), "list": []any{"x", int64(2)}},
		"nan":          math.NaN(),
	}
	got := headersOf(headersJSON(h))
	want := map[string]any{
		"aggregate_id": "42",
		"n":            int64(5),
		"small":        int64(7),
		"f":            1.5,
		"ok":           true,
		"nested":       map[string]any{"a": int64(1), "list": []any{"x", int64(2)}},
		"nan":          "NaN",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %#v\nwant %#v", got, want)
	}
}
