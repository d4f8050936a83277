package examplee2e_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbox/walbox/examples/orders"
	"github.com/walbox/walbox/internal/testenv"
)

// The example as compose runs it: two notifiers share four partitions of their queue. The
// relay needs no change: the consumer hashes the aggregate_id header walbox sets on every
// message. Each order is notified once, and both notifiers get a share.
func TestTwoNotifiersShareFourPartitions(t *testing.T) {
	s := newSystem(t, testenv.SharedRabbit(t))
	s.startRelay()
	var handled [2]atomic.Int64
	for i := range handled {
		s.startConsumer(orders.PartitionedConfig(s.rabbit.URL(), s.exchange, s.queue, 4), &handled[i])
	}
	deadline := time.Now().Add(time.Minute)
	for s.count("SELECT count(DISTINCT holder) FROM walbox_consumer_leases WHERE expires_at > clock_timestamp()") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the two notifiers did not share the partitions within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	placed := s.placeConcurrently(40)
	s.waitNotified(len(placed), deliveryTimeout)
	s.checkNotifiedOnce(placed)
	if handled[0].Load() == 0 || handled[1].Load() == 0 {
		t.Errorf("notifiers handled %d and %d messages; want both some: the hash spreads the orders",
			handled[0].Load(), handled[1].Load())
	}
}
