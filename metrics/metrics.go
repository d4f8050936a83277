package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/wire"
)

// Metrics implements replication.Observer. Observe must be called from one goroutine (the relay's).
type Metrics struct {
	published, confirmed                       *prometheus.CounterVec
	parked                                     *prometheus.CounterVec
	returned, nacked                           prometheus.Counter
	retried                                    prometheus.Counter
	reconnects                                 *prometheus.CounterVec
	confirmLat, commitLat, publishLag, readLag prometheus.Histogram
	writeLag, heldLag                          prometheus.Histogram
	lateness                                   prometheus.Histogram
	retained                                   prometheus.Gauge
	walStatus                                  *prometheus.GaugeVec
	pollErrors                                 prometheus.Counter
	byType                                     map[string]typeCounters // cache of the label lookups, by event type
	reg                                        prometheus.Registerer
}

type typeCounters struct{ published, confirmed prometheus.Counter }

var _ replication.Observer = (*Metrics)(nil)

// New registers the relay's metrics with reg.
func New(reg prometheus.Registerer) *Metrics {
	f := factory{reg}
	m := &Metrics{
		published: f.counterVec("walbox_messages_published_total", "Messages handed to the broker.", "event_type"),
		confirmed: f.counterVec("walbox_messages_confirmed_total", "Messages the broker confirmed.", "event_type"),
		parked: f.counterVec("walbox_messages_parked_total",
			"Messages set aside as undeliverable, to the park exchange.", "event_type", "reason_kind"),
		returned: f.counter("walbox_messages_returned_total", "Messages the broker returned as unroutable."),
		nacked:   f.counter("walbox_messages_nacked_total", "Messages the broker refused (basic.nack)."),
		retried: f.counter("walbox_messages_retried_total",
			"Messages in flight when a session failed; they are sent again from the slot."),
		reconnects: f.counterVec("walbox_reconnects_total", "Sessions that ended in an error, by reason.", "reason"),
		confirmLat: f.histogram("walbox_confirm_latency_seconds", "Time from publish to the broker's confirm."),
		commitLat: f.histogram("walbox_commit_to_confirm_seconds",
			"Time from the transaction's commit (its Begin message's timestamp) to the broker's confirm."),
		publishLag: f.histogram("walbox_commit_to_publish_seconds",
			"Time from the transaction's commit to walbox's publish of the message: the server decoding and sending it, "+
				"walbox reading it, and any wait before the publish (a full window, a blocked broker). "+
				"The rest of commit to confirm is publish to confirm (walbox_confirm_latency_seconds)."),
		readLag: f.histogram("walbox_commit_to_read_seconds",
			"Time from the transaction's commit to walbox reading the message from the replication connection: "+
				"the server decoding and sending it, and, while walbox's window is full, the wait to be read. "+
				"The first part of walbox_commit_to_publish_seconds."),
		writeLag: f.histogram("walbox_commit_to_write_seconds",
			"Time from the transaction's commit to walbox writing the message's last frame to the broker's socket: "+
				"walbox_commit_to_publish_seconds and then any time the publisher held the frames back to write several together. "+
				"The rest of commit to confirm is the broker's."),
		heldLag: f.histogram("walbox_publish_to_write_seconds",
			"Time from walbox's publish of the message to the write of its last frame to the broker's socket: "+
				"how long the publisher held it back to write several messages together."),
		lateness: f.histogram("walbox_scheduled_lateness_seconds",
			"How late a scheduled message left: the broker's confirm of it less its deliver_at, by the database's clock."),
		retained: f.gauge("walbox_slot_retained_wal_bytes",
			"WAL the slot makes the server keep: pg_current_wal_lsn() - restart_lsn."),
		walStatus:  f.gaugeVec("walbox_slot_wal_status", "1 for the slot's current wal_status.", "wal_status"),
		pollErrors: f.counter("walbox_slot_poll_errors_total", "Failed reads of the slot's state."),
		byType:     map[string]typeCounters{},
		reg:        reg,
	}
	return m
}

// WatchSchedule registers walbox_scheduled_messages, read from waiting at each scrape.
func (m *Metrics) WatchSchedule(waiting func() float64) {
	factory{m.reg}.gaugeFunc("walbox_scheduled_messages",
		"Messages in the schedule, waiting for their deliver_at (every slot's; read every few seconds while active).", waiting)
}

// ScheduledLateness observes how late one scheduled message left.
func (m *Metrics) ScheduledLateness(d time.Duration) { m.lateness.Observe(max(d, 0).Seconds()) }

// WatchStats registers the gauges read from the relay's stats at each scrape.
func (m *Metrics) WatchStats(stats *replication.Stats) { factory{m.reg}.statsGauges(stats) }

// WatchCanary registers the canary's metrics: its age, read at each scrape, and its interval. It
// returns the function that observes a canary's latency, commit to return.
func (m *Metrics) WatchCanary(interval time.Duration, age func() time.Duration) func(time.Duration) {
	f := factory{m.reg}
	f.gaugeFunc("walbox_canary_age_seconds", "Time since the last canary came back (or since this instance became active). "+
		"0 on a standby.", func() float64 { return age().Seconds() })
	f.gaugeFunc("walbox_canary_interval_seconds", "How often the canary is written (--canary-interval).",
		func() float64 { return interval.Seconds() })
	h := f.histogram("walbox_canary_latency_seconds", "Time from a canary's commit to walbox reading it back from its queue.")
	return func(d time.Duration) { h.Observe(d.Seconds()) }
}

// Observe counts one relay event.
func (m *Metrics) Observe(e replication.Event) {
	switch e.Kind {
	case replication.Published:
		m.counters(e.EventType).published.Inc()
	case replication.Confirmed:
		m.counters(e.EventType).confirmed.Inc()
		m.confirmLat.Observe(e.ConfirmLatency.Seconds())
		if e.CommitLatency > 0 {
			m.commitLat.Observe(e.CommitLatency.Seconds())
			m.publishLag.Observe(max(e.PublishDelay, 0).Seconds()) // below 0 only if the clocks disagree
			m.readLag.Observe(max(e.ReadDelay, 0).Seconds())
			if e.WriteDelay > 0 {
				m.writeLag.Observe(e.WriteDelay.Seconds())
				m.heldLag.Observe(max(e.WriteDelay-e.PublishDelay, 0).Seconds()) // below 0: written during the call
			}
		}
	case replication.ConfirmFailed:
		switch {
		case errors.Is(e.Err, publisher.ErrReturned):
			m.returned.Inc()
		case errors.Is(e.Err, publisher.ErrNacked):
			m.nacked.Inc()
		}
	case replication.Parked:
		m.parked.WithLabelValues(e.EventType, e.Reason).Inc()
	case replication.SessionEnded:
		if e.Err == nil || errors.Is(e.Err, context.Canceled) {
			return
		}
		m.retried.Add(float64(e.Retried))
		m.reconnects.WithLabelValues(reason(e.Err)).Inc()
	}
}

func (m *Metrics) counters(eventType string) typeCounters {
	c, ok := m.byType[eventType]
	if !ok {
		c = typeCounters{m.published.WithLabelValues(eventType), m.confirmed.WithLabelValues(eventType)}
		m.byType[eventType] = c
	}
	return c
}

// reason classifies the error that ended a session. The reasons are slot_active, slot_gap,
// not_covered, schema_drift, nack, returned, broker, decode and database. A slot_gap means the slot
// is missing, lost, or not the one walbox recorded. A session ends with not_covered when the
// publication no longer covers an outbox table.
func reason(err error) string {
	var de *decoder.Error
	switch {
	case errors.Is(err, replication.ErrSlotActive):
		return "slot_active"
	case errors.Is(err, replication.ErrSlotGap), errors.Is(err, replication.ErrSlotMissing), errors.Is(err, replication.ErrSlotLost):
		return "slot_gap"
	case errors.Is(err, replication.ErrNotCovered), errors.Is(err, replication.ErrNoPublication):
		return "not_covered"
	case errors.Is(err, decoder.ErrSchemaDrift):
		return "schema_drift"
	case errors.Is(err, publisher.ErrNacked):
		return "nack"
	case errors.Is(err, publisher.ErrReturned):
		return "returned"
	case errors.Is(err, wire.ErrNotRecorded):
		return "database"
	case replication.IsBrokerError(err):
		return "broker"
	case errors.As(err, &de):
		return "decode"
	}
	return "database"
}

// setSlot records the slot's retained WAL and wal_status.
func (m *Metrics) setSlot(retained int64, walStatus string) {
	m.retained.Set(float64(retained))
	m.walStatus.Reset()
	if walStatus != "" {
		m.walStatus.WithLabelValues(walStatus).Set(1)
	}
}

// pollError counts a failed read of the slot's state.
func (m *Metrics) pollError() { m.pollErrors.Inc() }

// factory creates and registers metrics.
type factory struct{ reg prometheus.Registerer }

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	f.reg.MustRegister(g)
	return g
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help,
		Buckets: prometheus.ExponentialBuckets(0.0000625, 2, 19)}) // 62.5 µs to 16 s: sub-millisecond medians need the low ones
	f.reg.MustRegister(h)
	return h
}

func (f factory) gaugeFunc(name, help string, fn func() float64) {
	f.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, fn))
}

// statsGauges registers the gauges read from the relay's Stats at scrape time.
func (f factory) statsGauges(s *replication.Stats) {
	f.gaugeFunc("walbox_inflight_messages", "Messages published and not yet confirmed.",
		func() float64 { return float64(s.InFlight.Load()) })
	f.gaugeFunc("walbox_oldest_unconfirmed_age_seconds", "Age of the oldest message awaiting the broker's confirm.",
		func() float64 { return ageSeconds(s.OldestSent.Load()) })
	f.gaugeFunc("walbox_confirmed_lsn_bytes", "Position last confirmed to the server as flushed, as a number.",
		func() float64 { return float64(s.ConfirmedLSN.Load()) })
	f.gaugeFunc("walbox_received_lsn_bytes", "End of the last transaction received, as a number.",
		func() float64 { return float64(s.ReceivedLSN.Load()) })
	f.gaugeFunc("walbox_server_wal_lsn_bytes", "The server's WAL end from its last keepalive, as a number.",
		func() float64 { return float64(s.ServerLSN.Load()) })
	f.gaugeFunc("walbox_replication_lag_bytes", "Server WAL end minus the confirmed position.",
		func() float64 { return lag(s.ServerLSN.Load(), s.ConfirmedLSN.Load()) })
	f.gaugeFunc("walbox_active", "1 while this instance streams from the slot, 0 as a standby or between sessions.",
		func() float64 { return boolFloat(s.Streaming.Load()) })
	f.gaugeFunc("walbox_last_confirm_timestamp_seconds", "Unix time of the broker's last confirm.",
		func() float64 { return float64(s.LastConfirm.Load()) / 1e9 })
}

func ageSeconds(unixNano int64) float64 {
	if unixNano == 0 {
		return 0
	}
	return time.Since(time.Unix(0, unixNano)).Seconds()
}

func lag(server, confirmed uint64) float64 {
	if server < confirmed {
		return 0
	}
	return float64(server - confirmed)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
