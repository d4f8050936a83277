package metrics_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/metrics"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/replication"
)

func TestObserveCountsEachEvent(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	var stats replication.Stats
	m.WatchStats(&stats)

	for range 3 {
		m.Observe(replication.Event{Kind: replication.Published, EventType: "order.created"})
	}
	m.Observe(replication.Event{Kind: replication.Confirmed, EventType: "order.created",
		ConfirmLatency: 3 * time.Millisecond, CommitLatency: 5 * time.Millisecond, PublishDelay: 2 * time.Millisecond,
		ReadDelay: time.Millisecond, WriteDelay: 2500 * time.Microsecond})
	m.Observe(replication.Event{Kind: replication.ConfirmFailed, Err: fmt.Errorf("x: %w", publisher.ErrNacked)})
	m.Observe(replication.Event{Kind: replication.Parked, EventType: "", Reason: "bad_row"})
	m.Observe(replication.Event{Kind: replication.SessionEnded, Retried: 7,
		Err: fmt.Errorf("broker did not confirm: %w", publisher.ErrNacked)})
	m.Observe(replication.Event{Kind: replication.SessionEnded}) // a clean stop counts nothing
	stats.InFlight.Store(4)
	stats.Streaming.Store(true)
	stats.ServerLSN.Store(1000)
	stats.ConfirmedLSN.Store(400)
	m.SetSlot(12345, "reserved")

	want := `
# HELP walbox_messages_published_total Messages handed to the broker.
# TYPE walbox_messages_published_total counter
walbox_messages_published_total{event_type="order.created"} 3
# HELP walbox_messages_confirmed_total Messages the broker confirmed.
# TYPE walbox_messages_confirmed_total counter
walbox_messages_confirmed_total{event_type="order.created"} 1
# HELP walbox_messages_nacked_total Messages the broker refused (basic.nack).
# TYPE walbox_messages_nacked_total counter
walbox_messages_nacked_total 1
# HELP walbox_messages_parked_total Messages set aside as undeliverable, to the park exchange.
# TYPE walbox_messages_parked_total counter
walbox_messages_parked_total{event_type="",reason_kind="bad_row"} 1
# HELP walbox_messages_retried_total Messages in flight when a session failed; they are sent again from the slot.
# TYPE walbox_messages_retried_total counter
walbox_messages_retried_total 7
# HELP walbox_reconnects_total Sessions that ended in an error, by reason.
# TYPE walbox_reconnects_total counter
walbox_reconnects_total{reason="nack"} 1
# HELP walbox_inflight_messages Messages published and not yet confirmed.
# TYPE walbox_inflight_messages gauge
walbox_inflight_messages 4
# HELP walbox_active 1 while this instance streams from the slot, 0 as a standby or between sessions.
# TYPE walbox_active gauge
walbox_active 1
# HELP walbox_replication_lag_bytes Server WAL end minus the confirmed position.
# TYPE walbox_replication_lag_bytes gauge
walbox_replication_lag_bytes 600
# HELP walbox_slot_retained_wal_bytes WAL the slot makes the server keep: pg_current_wal_lsn() - restart_lsn.
# TYPE walbox_slot_retained_wal_bytes gauge
walbox_slot_retained_wal_bytes 12345
# HELP walbox_slot_wal_status 1 for the slot's current wal_status.
# TYPE walbox_slot_wal_status gauge
walbox_slot_wal_status{wal_status="reserved"} 1
`
	names := []string{"walbox_messages_published_total", "walbox_messages_confirmed_total", "walbox_messages_nacked_total",
		"walbox_messages_parked_total", "walbox_messages_retried_total", "walbox_reconnects_total", "walbox_inflight_messages",
		"walbox_active", "walbox_replication_lag_bytes", "walbox_slot_retained_wal_bytes", "walbox_slot_wal_status"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"walbox_commit_to_confirm_seconds", "walbox_commit_to_publish_seconds", "walbox_commit_to_read_seconds"} {
		if n := testutil.CollectAndCount(reg, h); n != 1 {
			t.Fatalf("%s: %d series", h, n)
		}
	}
	// Commit to publish, to read and to write are the event's PublishDelay, ReadDelay and WriteDelay;
	// publish to write is the difference.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]float64{"walbox_commit_to_publish_seconds": 0.002, "walbox_commit_to_read_seconds": 0.001,
		"walbox_commit_to_write_seconds": 0.0025, "walbox_publish_to_write_seconds": 0.0005}
	for _, mf := range mfs {
		if sum, ok := sums[mf.GetName()]; ok {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 1 || math.Abs(h.GetSampleSum()-sum) > 1e-9 {
				t.Fatalf("%s: %d samples, sum %v; want 1 of %v", mf.GetName(), h.GetSampleCount(), h.GetSampleSum(), sum)
			}
			delete(sums, mf.GetName())
		}
	}
	if len(sums) > 0 {
		t.Fatalf("not exported: %v", sums)
	}
}

func TestReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", replication.ErrSlotActive), "slot_active"},
		{fmt.Errorf("x: %w", publisher.ErrReturned), "returned"},
		{fmt.Errorf("x: %w", replication.ErrSlotGap), "slot_gap"},
		{fmt.Errorf("x: %w", replication.ErrSlotMissing), "slot_gap"},
		{fmt.Errorf("x: %w", replication.ErrNotCovered), "not_covered"},
		{&decoder.Error{Err: fmt.Errorf("%w: no column", decoder.ErrSchemaDrift)}, "schema_drift"},
		{&decoder.Error{Err: decoder.ErrMalformed}, "decode"},
		{errors.New("connection reset by peer"), "database"},
	}
	for _, tt := range tests {
		if got := metrics.Reason(tt.err); got != tt.want {
			t.Errorf("Reason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
