package slots_test

import (
	"testing"

	"github.com/walbox/walbox/slots"
)

func TestFailoverSlotWanted(t *testing.T) {
	for _, c := range []struct {
		mode    string
		major   int
		want    bool
		wantErr bool
	}{
		{"auto", 15, false, false}, {"auto", 17, true, false}, {"", 18, true, false},
		{"on", 17, true, false}, {"on", 16, false, true},
		{"off", 17, false, false}, {"off", 15, false, false},
	} {
		f, err := slots.ParseFailoverSlot(c.mode)
		if err != nil {
			t.Fatalf("ParseFailoverSlot(%q): %v", c.mode, err)
		}
		got, err := f.Wanted(c.major)
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("%q on PostgreSQL %d: got %t, %v; want %t, error %t", c.mode, c.major, got, err, c.want, c.wantErr)
		}
	}
	if _, err := slots.ParseFailoverSlot("yes"); err == nil {
		t.Error("ParseFailoverSlot(\"yes\"): no error")
	}
	for in, want := range map[string]int{"17.12 (Debian 17.12-1.pgdg+1)": 17, "15.20": 15, "18beta1": 18, "": 0} {
		if got := slots.MajorVersion(in); got != want {
			t.Errorf("MajorVersion(%q) = %d, want %d", in, got, want)
		}
	}
}
