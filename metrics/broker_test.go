package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/walbox/walbox/metrics"
)

// The label follows the node the relay is connected to, scrape by scrape, and the series is gone
// while it is connected to none.
func TestBrokerConnectedFollowsTheNode(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	node := "mq1:5672"
	m.WatchBroker(func() string { return node })
	for _, n := range []string{"mq1:5672", "", "mq3:5672"} {
		node = n
		want := ""
		if n != "" {
			want = "# HELP walbox_broker_connected 1, labelled with the host:port of the RabbitMQ node the relay is connected to; absent while it is connected to none.\n" +
				"# TYPE walbox_broker_connected gauge\nwalbox_broker_connected{broker=\"" + n + "\"} 1\n"
		}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "walbox_broker_connected"); err != nil {
			t.Errorf("connected to %q: %v", n, err)
		}
	}
}
