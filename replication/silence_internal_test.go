package replication

import (
	"testing"
	"time"
)

func TestSilenceBound(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name                  string
		configured, wst, stat time.Duration
		want                  time.Duration
		raised                bool
	}{
		{"default: three quarters of wal_sender_timeout", 0, 60 * s, s, 45 * s, false},
		{"default with a short wal_sender_timeout", 0, 2 * s, s / 4, 1500 * time.Millisecond, false},
		{"wal_sender_timeout off", 0, 0, s, 45 * s, false},
		{"too small a value is raised to what a busy walsender needs", 3 * s, 60 * s, s, 31 * s, true},
		{"a value above the floor is kept", 40 * s, 60 * s, s, 40 * s, false},
		{"never below three status intervals", 0, 2 * s, s, 3 * s, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, raised := silenceBound(tt.configured, tt.wst, tt.stat)
			if got != tt.want || raised != tt.raised {
				t.Fatalf("silenceBound(%v, %v, %v) = %v, %v; want %v, %v", tt.configured, tt.wst, tt.stat, got, raised, tt.want, tt.raised)
			}
		})
	}
}
