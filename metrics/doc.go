// Package metrics exports the relay's state as Prometheus metrics. It is the relay's Observer:
// counters and latency histograms per message. It reads the relay's Stats at scrape time:
// positions, in-flight, state. It polls the slot's retained WAL and wal_status from PostgreSQL. See
// docs/architecture.md for the relay it observes.
package metrics
