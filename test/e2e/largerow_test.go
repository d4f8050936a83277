package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"go.yaml.in/yaml/v3"
)

// chartMemory is what the Helm chart's values say about the relay's memory.
type chartMemory struct {
	GoMemLimit string `yaml:"goMemLimit"`
	Resources  struct {
		Limits struct {
			Memory string `yaml:"memory"`
		} `yaml:"limits"`
	} `yaml:"resources"`
}

// readChartMemory reads the chart's default GOMEMLIMIT and memory limit (in bytes).
func readChartMemory(t *testing.T) (goMemLimit string, limit int64) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "helm", "walbox", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v chartMemory
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	mi, ok := strings.CutSuffix(v.Resources.Limits.Memory, "Mi")
	n, err := strconv.ParseInt(mi, 10, 64)
	if !ok || err != nil || v.GoMemLimit == "" {
		t.Fatalf("chart memory limit %q, GOMEMLIMIT %q: want a limit in Mi and a GOMEMLIMIT", v.Resources.Limits.Memory, v.GoMemLimit)
	}
	return v.GoMemLimit, n << 20
}

// With its defaults, walbox relays a row of the largest size RabbitMQ 4 accepts by default (16
// MiB) and parks one a byte larger, naming the limit; run with the Helm chart's GOMEMLIMIT, its
// peak memory stays below the chart's memory limit.
func TestLargestRowUnderChartMemory(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	// Without the race detector, whose shadow memory would be measured too.
	w.bin = testenv.Build(t, "cmd/walbox")
	goMemLimit, limit := readChartMemory(t)

	const max = 16 << 20
	insert := func(size int) string {
		var id string
		// jsonb prints {"x": "..."} around the text: the payload is exactly size bytes.
		if err := w.conn.QueryRow(context.Background(), `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
			VALUES ('order', '1', 'order.big', jsonb_build_object('x', repeat('y', $1))) RETURNING id::text`, size-9).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	largest, over, after := insert(max), insert(max+1), insert(10)

	r := w.startRelay("GOMEMLIMIT=" + goMemLimit)
	got := w.queueMessages(w.queue, 2)
	if got[0].MessageId != largest || len(got[0].Body) != max || got[1].MessageId != after {
		t.Errorf("delivered %s (%d bytes) and %s, want %s (%d bytes) and %s",
			got[0].MessageId, len(got[0].Body), got[1].MessageId, largest, max, after)
	}
	parked := w.queueMessages(w.exchange+".parked", 1)
	if reason := fmt.Sprint(parked[0].Headers["x-walbox-reason"]); parked[0].MessageId != over || !strings.Contains(reason, "16777216") {
		t.Errorf("parked %s with reason %q, want %s over the maximum of 16777216", parked[0].MessageId, reason, over)
	}
	peak := peakRSS(t, r.PID())
	t.Logf("peak RSS %.1f MiB with GOMEMLIMIT=%s; the chart's limit is %d MiB", float64(peak)/(1<<20), goMemLimit, limit>>20)
	if peak >= limit {
		t.Errorf("peak RSS %.1f MiB, want below the chart's memory limit of %d MiB", float64(peak)/(1<<20), limit>>20)
	}
	if code := r.Stop(time.Minute); code != 0 {
		t.Errorf("walbox exited %d:\n%s", code, r.Output())
	}
}

// peakRSS reads the high-water mark of the resident set of process pid (VmHWM).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
