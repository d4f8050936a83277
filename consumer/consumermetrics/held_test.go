package consumermetrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/walbox/walbox/consumer/consumermetrics"
)

func TestWatchHeldReadsTheCountAtEachScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	n, err := int64(3), error(nil)
	consumermetrics.WatchHeld(reg, "notifications", func(context.Context) (int64, error) { return n, err })
	want := func(v string) string {
		return `# HELP walbox_consumer_held_messages Messages a partitioned consumer holds back behind a failed message of their aggregate, the failed ones included.
# TYPE walbox_consumer_held_messages gauge
` + v
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(`walbox_consumer_held_messages{consumer="notifications"} 3
`)), "walbox_consumer_held_messages"); err != nil {
		t.Error(err)
	}
	n = 0
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(`walbox_consumer_held_messages{consumer="notifications"} 0
`)), "walbox_consumer_held_messages"); err != nil {
		t.Error(err)
	}
	err = errors.New("database down")
	if got, _ := testutil.GatherAndCount(reg, "walbox_consumer_held_messages"); got != 0 {
		t.Errorf("%d series while the count fails, want none", got)
	}
}
