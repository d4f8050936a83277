package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// commitHistogram is walbox's histogram of the time from a transaction's commit (the timestamp
// in its Begin message) to the broker's confirm of each of its messages.
const commitHistogram = "walbox_commit_to_confirm_seconds"

// publishHistogram is the part of it before the publish: from the commit to walbox's publish of the
// message (the server decoding and sending it, walbox reading it, any wait for the window or a
// blocked broker). Older builds lack it.
const publishHistogram = "walbox_commit_to_publish_seconds"

// readHistogram is the first part of that: from the commit to walbox's reader reading the row
// from the replication connection (the server decoding and sending it). Older builds lack it.
const readHistogram = "walbox_commit_to_read_seconds"

// writeHistogram runs from the commit to walbox writing the message's last frame to the broker's
// socket; heldHistogram is its part after the publish call: how long the publisher held the frames
// back. Older builds lack them.
const (
	writeHistogram = "walbox_commit_to_write_seconds"
	heldHistogram  = "walbox_publish_to_write_seconds"
)

// bucket is one cumulative histogram bucket.
type bucket struct {
	le    float64 // upper bound, seconds (+Inf for the last)
	count float64 // observations <= le
}

// histogram is a cumulative Prometheus histogram, buckets sorted by bound.
type histogram []bucket

// scrape reads the buckets of histograms names from a Prometheus text endpoint in one request,
// in the order of names. The first must be there; any other the endpoint lacks is nil.
func scrape(ctx context.Context, url string, names ...string) ([]histogram, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	hs := make([]histogram, len(names))
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		for i, name := range names {
			rest, ok := strings.CutPrefix(sc.Text(), name+`_bucket{le="`)
			if !ok {
				continue
			}
			le, count, ok := strings.Cut(rest, `"} `)
			if !ok {
				continue
			}
			b, err1 := strconv.ParseFloat(le, 64)
			c, err2 := strconv.ParseFloat(strings.TrimSpace(count), 64)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("scrape %s: bad bucket line %q", url, sc.Text())
			}
			hs[i] = append(hs[i], bucket{le: b, count: c})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	if len(hs[0]) == 0 {
		return nil, fmt.Errorf("scrape %s: no %s", url, names[0])
	}
	for _, h := range hs {
		slices.SortFunc(h, func(a, b bucket) int { return cmpFloat(a.le, b.le) })
	}
	return hs, nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// minus returns the observations of h that came after earlier, a scrape of the same histogram.
func (h histogram) minus(earlier histogram) histogram {
	out := slices.Clone(h)
	for i := range out {
		if i < len(earlier) && earlier[i].le == out[i].le {
			out[i].count -= earlier[i].count
		}
	}
	return out
}

// quantile estimates the q-quantile as Prometheus's histogram_quantile does: linear
// interpolation within the bucket that holds it. It returns -1 for an empty histogram, and the
// highest finite bound when the quantile falls in the +Inf bucket.
func (h histogram) quantile(q float64) time.Duration {
	if len(h) == 0 || h[len(h)-1].count <= 0 {
		return -1
	}
	rank := q * h[len(h)-1].count
	lower, below := 0.0, 0.0
	for _, b := range h {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				return seconds(lower)
			}
			if b.count == below {
				return seconds(b.le)
			}
			return seconds(lower + (b.le-lower)*(rank-below)/(b.count-below))
		}
		lower, below = b.le, b.count
	}
	return seconds(lower)
}

// percentiles summarises the histogram; Max is the upper bound of the highest non-empty bucket.
func (h histogram) percentiles() *Percentiles {
	if len(h) == 0 || h[len(h)-1].count <= 0 {
		return nil
	}
	p := &Percentiles{N: int(h[len(h)-1].count), P50: h.quantile(0.5), P99: h.quantile(0.99), P999: h.quantile(0.999), Approx: true}
	below := 0.0
	for _, b := range h {
		if b.count > below && !math.IsInf(b.le, 1) {
			p.Max = seconds(b.le)
		}
		below = b.count
	}
	return p
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// settle waits up to a few seconds for walbox to have no message in flight, as its /status
// reports, so that the confirms of the last messages delivered are in its histogram.
func settle(ctx context.Context, statusURL string) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var st struct {
			InFlight int64 `json:"in_flight"`
		}
		if err := getJSON(ctx, statusURL, &st); err != nil || st.InFlight == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func getJSON(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
