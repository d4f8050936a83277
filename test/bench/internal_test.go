package bench

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

func TestPayloadIsWhatJSONBPrints(t *testing.T) {
	for _, size := range []int{64, 300, 10 << 10} {
		p := payload(4711, 1779437724123456789, size)
		if got := len(p); got < size-8 || got > size+8 {
			t.Errorf("size %d: payload of %d bytes", size, got)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(p), &v); err != nil {
			t.Fatalf("size %d: not JSON: %v", size, err)
		}
		// jsonb orders keys by length, then bytewise, and prints ": " and ", ".
		if !strings.HasPrefix(p, `{"ts": 1779437724123456789, "pad": "`) || !strings.HasSuffix(p, `", "seq": 4711}`) {
			t.Errorf("size %d: %.60q... is not in jsonb's form", size, p)
		}
		seq, ok := field([]byte(p), keySeq)
		ts, ok2 := field([]byte(p), keyTS)
		if !ok || !ok2 || seq != 4711 || ts != 1779437724123456789 {
			t.Errorf("size %d: read back seq %d, ts %d", size, seq, ts)
		}
	}
}

func TestPayloadsDiffer(t *testing.T) {
	if payload(1, 0, 1000)[20:] == payload(2, 0, 1000)[20:] {
		t.Error("two rows have the same padding: TOAST would compress them unrealistically")
	}
}

func TestPercentilesAreNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 1000; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	p := percentilesOf(d)
	want := Percentiles{N: 1000, P50: 500 * time.Millisecond, P99: 990 * time.Millisecond, P999: 999 * time.Millisecond,
		Max: time.Second}
	if *p != want {
		t.Errorf("got %+v, want %+v", *p, want)
	}
	if percentilesOf(nil) != nil {
		t.Error("percentiles of nothing: want nil")
	}
}

func TestLatenciesSkipMissingSamples(t *testing.T) {
	starts := []int64{100, 0, 300, 400}
	arrivals := []int64{150, 260, 0, 410}
	p := latencies(starts, arrivals)
	if p.N != 2 || p.P50 != 10 || p.Max != 50 {
		t.Errorf("got %+v, want 2 samples, p50 10ns, max 50ns", *p)
	}
}

func TestHistogramQuantileInterpolatesLikePrometheus(t *testing.T) {
	h := histogram{{0.001, 10}, {0.002, 60}, {0.004, 100}, {math.Inf(1), 100}}
	tests := []struct {
		q    float64
		want time.Duration
	}{
		{0.05, 500 * time.Microsecond},  // half of the first bucket
		{0.5, 1800 * time.Microsecond},  // 40 of the 50 in (1 ms, 2 ms]
		{0.99, 3950 * time.Microsecond}, // 39 of the 40 in (2 ms, 4 ms]
	}
	for _, tt := range tests {
		if got := h.quantile(tt.q); got != tt.want {
			t.Errorf("q %v: got %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := (histogram{{0.001, 0}, {math.Inf(1), 0}}).quantile(0.5); got != -1 {
		t.Errorf("empty histogram: got %v, want -1", got)
	}
}

func TestHistogramMinusKeepsTheWindow(t *testing.T) {
	before := histogram{{0.001, 5}, {0.002, 5}, {math.Inf(1), 5}}
	after := histogram{{0.001, 5}, {0.002, 105}, {math.Inf(1), 105}}
	p := after.minus(before).percentiles()
	if p == nil || p.N != 100 || !p.Approx || p.P50 != 1500*time.Microsecond || p.Max != 2*time.Millisecond {
		t.Errorf("got %+v, want 100 samples in (1 ms, 2 ms], p50 1.5 ms, max 2 ms, approximate", p)
	}
}

func TestProcReadings(t *testing.T) {
	if cpu := processCPU(os.Getpid()); cpu < 0 {
		t.Errorf("CPU of this process: got %v, want a reading", cpu)
	}
	if rss := peakRSS(os.Getpid()); rss <= 0 {
		t.Errorf("peak RSS of this process: got %v, want a reading", rss)
	}
	if cpu := processCPU(1 << 30); cpu != -1 {
		t.Errorf("CPU of a process that does not exist: got %v, want -1", cpu)
	}
	if rss := peakRSS(1 << 30); rss != -1 {
		t.Errorf("RSS of a process that does not exist: got %v, want -1", rss)
	}
	before := writeCalls(os.Getpid())
	f, err := os.CreateTemp(t.TempDir(), "w")
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("x"))
	f.Close()
	if after := writeCalls(os.Getpid()); before < 0 || after <= before {
		t.Errorf("write calls of this process: %d, then %d after a write; want them counted", before, after)
	}
	if n := writeCalls(1 << 30); n != -1 {
		t.Errorf("write calls of a process that does not exist: got %v, want -1", n)
	}
}

func TestHotPathFramesDecode(t *testing.T) {
	if err := newFrames(payload(1, 0, 300)).check(); err != nil {
		t.Fatal(err)
	}
}
