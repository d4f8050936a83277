package checkpoint_test

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

// benchWindow is the relay's default window: messages dispatched and not yet acked.
const benchWindow = 1024

// BenchmarkTrackerWindow runs the ledger as the relay does while draining.
// It has 100-row transactions, a full window in flight, and acks in order one window behind. One op is one message.
func BenchmarkTrackerWindow(b *testing.B) {
	tr := newLedger(0)
	var seq, acked uint64
	var lsn pglogrepl.LSN
	b.ReportAllocs()
	for b.Loop() {
		if seq%100 == 0 {
			tr.Begin()
		}
		seq++
		if err := tr.Dispatch(seq, struct{}{}); err != nil {
			b.Fatal(err)
		}
		if seq%100 == 0 {
			lsn += 100 * 400
			tr.Commit(lsn)
		}
		if seq-acked > benchWindow {
			acked++
			if _, err := tr.Ack(acked); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkTrackerOutOfOrder acks each block of 64 single-row transactions in reverse order.
// So every ack but one per block waits in the ledger for the gap below it to close.
func BenchmarkTrackerOutOfOrder(b *testing.B) {
	const block = 64
	tr := newLedger(0)
	var seq uint64
	var lsn pglogrepl.LSN
	b.ReportAllocs()
	for b.Loop() {
		tr.Begin()
		seq++
		if err := tr.Dispatch(seq, struct{}{}); err != nil {
			b.Fatal(err)
		}
		lsn += 400
		tr.Commit(lsn)
		if seq%block != 0 {
			continue
		}
		for s := seq; s > seq-block; s-- {
			if _, err := tr.Ack(s); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
