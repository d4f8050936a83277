package decoder

import (
	"encoding/json"
	"reflect"
	"testing"
)

// The headers fast path is internal; it is checked against encoding/json directly, because a
// difference would show only as a wrong header value, never as a failure.

var flatStringsSeeds = []string{
	`{}`, ` { } `, `{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`,
	`{"a":"b","c":"d"}`, `{"a": "b", "a": "c"}`, "{\n\t\"k\" :\r\"v\" }", `{"a":"b" "c":"d"}`, `{"a":"b",}`,
	`{"a":"b"`, `{"a":"\u00e9"}`, `{"a":1}`, `{"a":"b"} x`, `{"a":"é"}`, "{\"a\":\"\xff\"}", "{\"a\":\"\x01\"}",
	`{,}`, `{"a"}`, `{"a":}`, `[]`, `null`, ``, `{"":""}`,
}

func TestFlatStringsAgreesWithEncodingJSON(t *testing.T) {
	for _, in := range flatStringsSeeds {
		checkFlatStrings(t, []byte(in))
	}
}

func FuzzFlatStrings(f *testing.F) {
	for _, in := range flatStringsSeeds {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkFlatStrings(t, in) })
}

func checkFlatStrings(t *testing.T, in []byte) {
	t.Helper()
	got, ok := flatStrings(in)
	if !ok {
		return
	}
	var want map[string]any
	if err := json.Unmarshal(in, &want); err != nil {
		t.Fatalf("flatStrings(%q) accepted invalid JSON: %v", in, err)
	}
	if len(want) == 0 {
		want = nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("flatStrings(%q) = %v, encoding/json gives %v", in, got, want)
	}
}
