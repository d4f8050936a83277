package replication

import (
	"testing"
	"time"
)

func TestLapse(t *testing.T) {
	const s = time.Second
	type step struct {
		sent bool          // a status update sent at; else a check
		at   time.Duration // after the session's start
		held bool          // the check's answer
	}
	tests := []struct {
		name  string
		wst   time.Duration
		steps []step
	}{
		{"updates in time keep it held", 4 * s, []step{{false, 2 * s, true}, {true, 2 * s, true}, {false, 4 * s, true}, {true, 4 * s, true}, {false, 7 * s, true}}},
		{"a check past the bound fails", 4 * s, []step{{true, 1 * s, true}, {false, 4*s + 1, false}}},
		{"a late update does not revive it", 4 * s, []step{{true, 1 * s, true}, {true, 9 * s, false}, {false, 9 * s, false}, {true, 10 * s, false}, {false, 10 * s, false}}},
		{"no timeout: always held", 0, []step{{false, time.Hour, true}, {true, 2 * time.Hour, true}, {false, 9 * time.Hour, true}}},
		{"before the first update, the start counts", 4 * s, []step{{false, 3 * s, true}, {false, 3*s + 1, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLapse(tt.wst)
			for i, st := range tt.steps {
				if st.sent {
					l.sentAt(st.at)
				}
				if got := l.heldAt(st.at); got != st.held {
					t.Fatalf("step %d (%+v): held %v, want %v", i, st, got, st.held)
				}
			}
		})
	}
}
