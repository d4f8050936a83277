package bench

import (
	"math"
	"slices"
	"time"
)

// Percentiles summarise a latency distribution.
type Percentiles struct {
	N                   int
	P50, P99, P999, Max time.Duration
	// Approx marks figures estimated from a histogram's buckets rather than from every sample.
	Approx bool `json:",omitempty"`
}

// latencies returns the percentiles of arrivals[i] - starts[i] (Unix nanoseconds) over the
// messages that have both; nil if none has.
func latencies(starts, arrivals []int64) *Percentiles {
	var d []time.Duration
	for i, a := range arrivals {
		if i < len(starts) && a != 0 && starts[i] != 0 {
			d = append(d, time.Duration(a-starts[i]))
		}
	}
	return percentilesOf(d)
}

// percentilesOf summarises d, which it sorts; nil if d is empty.
func percentilesOf(d []time.Duration) *Percentiles {
	if len(d) == 0 {
		return nil
	}
	slices.Sort(d)
	return &Percentiles{N: len(d), P50: rank(d, 0.50), P99: rank(d, 0.99), P999: rank(d, 0.999), Max: d[len(d)-1]}
}

// rank returns the nearest-rank q-quantile of sorted.
func rank(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
