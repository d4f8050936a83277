package streampub

import "testing"

// The anchor's id and position come from one message; a message below the broker's last id is
// no anchor.
func TestAnchorAt(t *testing.T) {
	pos := Position{Timeline: 1, LSN: 0x100, Index: 2}
	tests := []struct {
		name string
		last int64 // the broker's last id, queried first
		span span
		want anchor
	}{
		{"the last message", 10, span{id: 10, pos: pos, found: true}, anchor{id: 10, pos: pos, found: true}},
		{"stored after the query", 10, span{id: 12, pos: pos, found: true}, anchor{id: 12, pos: pos, found: true}},
		{"below the last id", 10, span{id: 8, pos: pos, found: true}, anchor{id: 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (anchor{id: tt.last}).at(tt.span, producerOf{}); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
