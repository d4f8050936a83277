package decoder_test

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/walbox/walbox/decoder"
)

// headerCases are the header values of issue 20: every number arrives as the value written, as
// an int64, an exact float64 or its text.
var headerCases = []struct {
	name string
	json string
	want any
}{
	{"int64 max is a long", "9223372036854775807", int64(math.MaxInt64)},
	{"int64 min is a long", "-9223372036854775808", int64(math.MinInt64)},
	{"2^53+1 is a long, not rounded", "9007199254740993", int64(9007199254740993)},
	{"small integer is a long", "3", int64(3)},
	{"negative zero is a long zero", "-0", int64(0)},
	{"int64 max + 1 is text", "9223372036854775808", "9223372036854775808"},
	{"integer beyond int64 is text", "12345678901234567890", "12345678901234567890"},
	{"1e400 is text", "1e400", "1e400"},
	{"-1e400 is text", "-1e400", "-1e400"},
	{"1e-400 is text, not zero", "1e-400", "1e-400"},
	{"an integer written in 401 digits is text", "1" + strings.Repeat("0", 400), "1" + strings.Repeat("0", 400)},
	{"a half is a double", "0.5", 0.5},
	{"a tenth is a double: its shortest form is 0.1", "0.1", 0.1},
	{"trailing zeros keep a double", "1.50", 1.5},
	{"a fraction of zero is a double", "1.0", 1.0},
	{"an exponent is a double", "1e300", 1e300},
	{"an exact integer beyond int64 is a double", "1000000000000000000000", 1e21},
	{"the smallest double is a double", "5e-324", 5e-324},
	{"more digits than a double holds are text", "0.1000000000000000055511151231257827", "0.1000000000000000055511151231257827"},
	{"2^53+1 with a fraction is text", "9007199254740993.0", "9007199254740993.0"},
	{"a rounded subnormal is text", "4.9e-324", "4.9e-324"},
}

// TestHeaderNumbersArriveExactly decodes each number as a header of a row and of an emitted
// message.
func TestHeaderNumbersArriveExactly(t *testing.T) {
	for _, tc := range headerCases {
		t.Run(tc.name, func(t *testing.T) {
			headers := `{"h": ` + tc.json + `}`
			for source, h := range decodeHeaders(t, headers) {
				if got := h["h"]; !reflect.DeepEqual(got, tc.want) {
					t.Errorf("%s: %s gives %#v (%T), want %#v (%T)", source, headers, got, got, tc.want, tc.want)
				}
			}
		})
	}
}

// TestHeaderShapeIsKept: objects and arrays keep their shape, numbers in them are converted too.
func TestHeaderShapeIsKept(t *testing.T) {
	headers := `{"o": {"big": 9007199254740993, "f": 0.25, "l": [1, 1e400, {"x": null}], "s": "v", "b": true}, "e": [], "eo": {}}`
	want := map[string]any{
		"o": map[string]any{"big": int64(9007199254740993), "f": 0.25,
			"l": []any{int64(1), "1e400", map[string]any{"x": nil}}, "s": "v", "b": true},
		"e": []any{}, "eo": map[string]any{},
	}
	for source, h := range decodeHeaders(t, headers) {
		if !reflect.DeepEqual(h, want) {
			t.Errorf("%s: got %#v\nwant %#v", source, h, want)
		}
	}
}

// TestReservedHeaderParksRow: a name starting with x-walbox-, in any case, makes the row and the
// emitted message bad, with a reason that names it; names that only look alike pass.
func TestReservedHeaderParksRow(t *testing.T) {
	for _, name := range []string{"x-walbox-error", "x-walbox-attempts", "X-Walbox-Error", "x-WALBOX-", "x-walbox-x"} {
		headers := fmt.Sprintf(`{"a": "b", %q: 1}`, name)
		for source, err := range decodeHeaderErrors(t, headers) {
			if !decoder.IsBadRow(err) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "reserved") {
				t.Errorf("%s: headers %s gave %v, want a bad row naming %q as reserved", source, headers, err, name)
				continue
			}
			if got := asError(t, err).Column; got != "headers" {
				t.Errorf("%s: error column %q, want headers", source, got)
			}
		}
	}
	for _, name := range []string{"x-walbox", "walbox-error", "x_walbox_error", "xx-walbox-error"} {
		headers := fmt.Sprintf(`{%q: "1"}`, name)
		for source, err := range decodeHeaderErrors(t, headers) {
			if err != nil {
				t.Errorf("%s: headers %s gave %v, want no error", source, headers, err)
			}
		}
	}
}

// TestHeadersStillRejectInvalidJSON: a text headers column with data after the object, or a
// number JSON does not allow, is not JSON. (An emitted message with them is not JSON as a whole.)
func TestHeadersStillRejectInvalidJSON(t *testing.T) {
	for _, headers := range []string{`{"a": 1} {}`, `{"a": 1} x`, `{"a": 1`, `{"a": 01}`, `{"a": 1.}`, `{"a": NaN}`} {
		err := decodeHeaderErrors(t, headers)["row"]
		if !decoder.IsBadRow(err) || !strings.Contains(err.Error(), "not valid JSON") {
			t.Errorf("headers %s gave %v, want not valid JSON", headers, err)
		}
	}
}

// decodeHeaders decodes headers as the headers of a row (a json column, whose text is kept as
// written) and of an emitted message, and returns both.
func decodeHeaders(t *testing.T, headers string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for source, err := range decodeHeaderErrors(t, headers) {
		if err != nil {
			t.Fatalf("%s: headers %s: %v", source, headers, err)
		}
	}
	for source, ev := range decodeWithHeaders(t, headers) {
		out[source] = ev.Message.Headers
	}
	return out
}

func decodeHeaderErrors(t *testing.T, headers string) map[string]error {
	t.Helper()
	errs := map[string]error{}
	for source, f := range headerFrames(t, headers) {
		_, errs[source] = f.d.Decode(testLSN, f.data)
	}
	return errs
}

func decodeWithHeaders(t *testing.T, headers string) map[string]decoder.Event {
	t.Helper()
	evs := map[string]decoder.Event{}
	for source, f := range headerFrames(t, headers) {
		ev, err := f.d.Decode(testLSN, f.data)
		if err != nil {
			t.Fatalf("%s: %v", source, err)
		}
		evs[source] = ev
	}
	return evs
}

type headerFrame struct {
	d    *decoder.Decoder
	data []byte
}

func headerFrames(t *testing.T, headers string) map[string]headerFrame {
	t.Helper()
	jsonHeaders := append([]col(nil), outboxCols...)
	jsonHeaders[5].oid = oidJSON
	content := fmt.Sprintf(`{"v": 1, "id": %q, "aggregate_type": "order", "aggregate_id": "42", "event_type": "order.created", `+
		`"payload": {}, "headers": %s, "created_at": "2026-11-22T07:15:24.123456+00:00"}`, rowID, headers)
	return map[string]headerFrame{
		"row": {newDecoder(t, jsonHeaders), insertMsg(outboxRelID, setCol(outboxRow("{}"), "headers", text(headers))...)},
		"emitted message": {decoder.New().WithMessagePrefix("walbox"),
			logicalMsg(true, testLSN, "walbox", content)},
	}
}
