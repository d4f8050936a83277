package replay

import "testing"

func TestWithRunningAddsTheIdsInProgressWithinTheSnapshot(t *testing.T) {
	for _, tt := range []struct {
		snapshot string
		running  []int64
		want     string
	}{
		{"100:110:", nil, "100:110:"},
		{"100:110:100,104", []int64{100, 101, 104, 109}, "100:110:100,101,104,109"},
		{"100:110:100", []int64{99, 110, 111}, "100:110:100"},
		{"5:5:", []int64{5}, "5:5:"},
	} {
		got, err := withRunning(tt.snapshot, tt.running)
		if err != nil || got != tt.want {
			t.Errorf("withRunning(%q, %v) = %q, %v; want %q", tt.snapshot, tt.running, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "1:2", "a:2:", "1:2:x"} {
		if got, err := withRunning(bad, nil); err == nil {
			t.Errorf("withRunning(%q) = %q; want an error", bad, got)
		}
	}
}
