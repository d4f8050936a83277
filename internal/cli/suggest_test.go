package cli

import "testing"

func TestNearest(t *testing.T) {
	known := []string{"window", "event-type", "exchange", "slot", "table"}
	tests := []struct{ word, want string }{
		{"windw", "window"},
		{"evnet-type", "event-type"}, // a swap is one edit
		{"exchnage", "exchange"},
		{"slto", "slot"},
		{"zzzzzz", ""},
		{"x", ""},
	}
	for _, tt := range tests {
		if got := nearest(tt.word, known); got != tt.want {
			t.Errorf("nearest(%q) = %q, want %q", tt.word, got, tt.want)
		}
	}
}
