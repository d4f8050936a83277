package relayd

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/walbox/walbox/publisher"
)

// A session that ends blocked holds the block: a later session's block continues it, and it ends
// only with a confirm after it or when the relay becomes a standby. Lanes blocked and unblocked in
// any order count as one block. The real-server cases are TestBlockedAcrossSessionsIsOneBlock and
// TestBlockedBrokerIsSeen; this covers the orders they cannot force.
func TestBlockWatchHoldsABlockAcrossSessions(t *testing.T) {
	var out bytes.Buffer
	var confirmed uint64
	standby := false
	b := &blockWatch{log: slog.New(slog.NewTextHandler(&out, nil)),
		confirmed: func() uint64 { return confirmed }, standby: func() bool { return standby }}
	count := func(msg string) int { return strings.Count(out.String(), msg) }
	check := func(step string, want bool, blocks, unblocks int) {
		t.Helper()
		if got := b.active(); got != want {
			t.Errorf("%s: blocked %v, want %v", step, got, want)
		}
		if got := count("broker blocks publishing"); got != blocks {
			t.Errorf("%s: %d block WARNs, want %d", step, got, blocks)
		}
		if got := count("broker unblocked publishing"); got != unblocks {
			t.Errorf("%s: %d unblock WARNs, want %d", step, got, unblocks)
		}
	}

	b.observe("a:5672", true, "low on memory")
	b.observe("a:5672", false, publisher.SessionEnded)
	check("session ended blocked", true, 1, 0)
	b.observe("b:5672", true, "low on memory")
	check("the next session, on another node, blocked too", true, 1, 0)
	b.observe("b:5672", false, "")
	check("connection.unblocked", false, 1, 1)

	b.observe("a:5672", true, "low on memory")
	b.observe("a:5672", false, publisher.SessionEnded)
	confirmed++
	check("a confirm after the session ended blocked", false, 2, 2)

	// Lanes: blocked one after the other, unblocked in another order.
	b.observe("a:5672", true, "low on memory")
	b.observe("b:5672", true, "low on memory")
	b.observe("a:5672", false, "")
	check("one lane of two unblocked", true, 3, 2)
	b.observe("b:5672", false, publisher.SessionEnded)
	check("the other lane ended blocked", true, 3, 2)
	standby = true
	check("the relay became a standby", false, 3, 3)
}
