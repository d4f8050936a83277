package replication

import (
	"reflect"
	"testing"

	"github.com/walbox/walbox/decoder"
)

func TestParseHistory(t *testing.T) {
	got, err := parseHistory("1\t0/3000158\tno recovery target specified\n\n2\t0/5000060\tat restore point \"before\"\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []decoder.TimelineEnd{{Timeline: 1, End: 0x3000158}, {Timeline: 2, End: 0x5000060}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseHistory = %v, want %v", got, want)
	}
	if _, err := parseHistory("1 nonsense\n"); err == nil {
		t.Fatal("parseHistory accepted a line without a switch point")
	}
}
