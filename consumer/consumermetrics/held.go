package consumermetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// heldDesc is walbox_consumer_held_messages, one series per consumer name.
var heldDesc = prometheus.NewDesc("walbox_consumer_held_messages",
	"Messages a partitioned consumer holds back behind a failed message of their aggregate, the failed ones included.",
	[]string{"consumer"}, nil)

// heldTimeout bounds the count at a scrape.
const heldTimeout = 5 * time.Second

// heldCollector counts a consumer's held messages at scrape time. A failed count is left out.
type heldCollector struct {
	consumer string
	held     func(context.Context) (int64, error)
}

func (c heldCollector) Describe(ch chan<- *prometheus.Desc) { ch <- heldDesc }

func (c heldCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), heldTimeout)
	defer cancel()
	n, err := c.held(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(n), c.consumer)
}

// WatchHeld registers walbox_consumer_held_messages{consumer="..."} with reg, read from held at
// each scrape: pass a partitioned consumer's HeldMessages.
func WatchHeld(reg prometheus.Registerer, consumer string, held func(context.Context) (int64, error)) {
	reg.MustRegister(heldCollector{consumer: consumer, held: held})
}
