package consumermetrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/consumer/consumermetrics"
)

// Two consumers of one process may each call New with one registry, as each sets its own Config.
// The second call does not panic: both count into the registry's metrics, under their names.
func TestNewTwiceOnOneRegistryShares(t *testing.T) {
	reg := prometheus.NewRegistry()
	billing, shipping := consumermetrics.New(reg), consumermetrics.New(reg)
	billing.Handled("billing", consumer.Delivery{})
	shipping.Handled("shipping", consumer.Delivery{})
	shipping.Handled("shipping", consumer.Delivery{})
	want := `# HELP walbox_consumer_handled_total Messages handled: the handler returned nil and its transaction committed. Duplicates are not counted.
# TYPE walbox_consumer_handled_total counter
walbox_consumer_handled_total{consumer="billing"} 1
walbox_consumer_handled_total{consumer="shipping"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "walbox_consumer_handled_total"); err != nil {
		t.Error(err)
	}
}
