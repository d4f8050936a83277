package metrics

import "github.com/prometheus/client_golang/prometheus"

// queueDesc is walbox_queue_unavailable: one series per park or alternate queue a session tried
// to declare.
var queueDesc = prometheus.NewDesc("walbox_queue_unavailable",
	"1 while walbox cannot declare its park or alternate queue (a classic queue whose node is down, say), "+
		"labelled with the queue; 0 once it can.",
	[]string{"queue"}, nil)

// queueCollector reads the queues' states at scrape time.
type queueCollector struct{ unavailable func() map[string]bool }

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- queueDesc }

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	for q, down := range c.unavailable() {
		ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, boolFloat(down), q)
	}
}

// WatchQueues registers walbox_queue_unavailable{queue="..."}, read from unavailable at each
// scrape. unavailable maps a queue to whether it cannot be declared now. It registers
// walbox_park_waiting too, read from waiting. That is 1 while a row waits to be parked because its
// queue cannot be declared.
func (m *Metrics) WatchQueues(unavailable func() map[string]bool, waiting func() bool) {
	m.reg.MustRegister(queueCollector{unavailable})
	factory{m.reg}.gaugeFunc("walbox_park_waiting",
		"1 while a row waits to be parked because its park queue cannot be declared (its node is down); "+
			"the slot does not move past it. Else 0.",
		func() float64 { return boolFloat(waiting()) })
}
