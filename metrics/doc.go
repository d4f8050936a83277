// Package metrics exports the relay's state as Prometheus metrics: it is the relay's Observer
// (counters and latency histograms per message), reads its Stats at scrape time (positions,
// in-flight, state), and polls the slot's retained WAL and wal_status from PostgreSQL.
package metrics
