// Package consumermetrics exports what the consumer library does as Prometheus metrics. Set
// consumer.Config.Metrics (or streamconsumer's) to New's result. It is a package of its own, so
// that a consumer without metrics links no Prometheus client. See docs/architecture.md.
package consumermetrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/consumer"
)

// Metrics implements consumer.Metrics. Every metric has the label consumer, the consumer's name.
type Metrics struct {
	lag     *prometheus.HistogramVec
	handled *prometheus.CounterVec
	failed  *prometheus.CounterVec
}

var _ consumer.Metrics = (*Metrics)(nil)

// New registers the consumer metrics with reg. Consumers of one process may share one Metrics.
// Or each may call New with one registry: they then share its metrics.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "walbox_consumer_lag_seconds",
			Help: "Time from the message's commit (its x-walbox-commit-time header) to its handler's commit. " +
				"Messages without the header are not counted here.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}, []string{"consumer"}), // 0.5 ms to about 65 s
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walbox_consumer_handled_total",
			Help: "Messages handled: the handler returned nil and its transaction committed. Duplicates are not counted."},
			[]string{"consumer"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walbox_consumer_failed_total",
			Help: "Failed attempts: the handler returned an error, or the database failed."}, []string{"consumer"}),
	}
	m.lag, m.handled, m.failed = register(reg, m.lag), register(reg, m.handled), register(reg, m.failed)
	return m
}

// register registers c with reg, and returns it. If an earlier New registered one like it, it
// returns that one instead. Any other refusal is a conflict of names in the program: it panics,
// as MustRegister does.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	if err != nil {
		panic(err)
	}
	return c
}

// Handled counts d as handled and observes its lag, if it carries its commit time.
func (m *Metrics) Handled(name string, d consumer.Delivery) {
	m.handled.WithLabelValues(name).Inc()
	if !d.CommitTime.IsZero() {
		m.lag.WithLabelValues(name).Observe(max(time.Since(d.CommitTime), 0).Seconds()) // below 0 only if the clocks disagree
	}
}

// Failed counts a failed attempt.
func (m *Metrics) Failed(name string, _ consumer.Delivery) { m.failed.WithLabelValues(name).Inc() }
