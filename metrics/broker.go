package metrics

import "github.com/prometheus/client_golang/prometheus"

// brokerDesc is walbox_broker_connected: one series, labelled with the node, while connected.
var brokerDesc = prometheus.NewDesc("walbox_broker_connected",
	"1, labelled with the host:port of the RabbitMQ node the relay is connected to; absent while it is connected to none.",
	[]string{"broker"}, nil)

// brokerCollector reads the connected node at scrape time, so a failover shows at the next scrape.
// No series of a node left behind lingers.
type brokerCollector struct{ connected func() string }

func (c brokerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- brokerDesc }

func (c brokerCollector) Collect(ch chan<- prometheus.Metric) {
	if b := c.connected(); b != "" {
		ch <- prometheus.MustNewConstMetric(brokerDesc, prometheus.GaugeValue, 1, b)
	}
}

// WatchBroker registers walbox_broker_connected{broker="host:port"}, read from connected at
// each scrape; connected returns "" while there is no broker connection.
func (m *Metrics) WatchBroker(connected func() string) {
	m.reg.MustRegister(brokerCollector{connected})
}

// WatchBlocked registers walbox_broker_blocked, read from blocked at each scrape. It is 1 while the
// broker blocks any of the relay's publishing connections, else 0. A memory or disk alarm blocks
// them.
func (m *Metrics) WatchBlocked(blocked func() bool) {
	factory{m.reg}.gaugeFunc("walbox_broker_blocked",
		"1 while the broker blocks a publishing connection of the relay (a memory or disk alarm), else 0.",
		func() float64 { return boolFloat(blocked()) })
}
