package replication

import (
	"strings"
	"testing"
	"time"
)

func TestSilenceIsMeasuredOnTheMonotonicClock(t *testing.T) {
	c := newHeardClock()
	// Only a time.Time taken by time.Now carries a monotonic reading ("m=" in its String).
	// Only differences of two such readings ignore steps of the wall clock.
	if !strings.Contains(c.base.String(), " m=") {
		t.Fatalf("the clock's base %v has no monotonic reading", c.base)
	}
	time.Sleep(30 * time.Millisecond)
	if got := c.silent(); got < 30*time.Millisecond || got > time.Second {
		t.Fatalf("silent() = %v after 30ms without a read", got)
	}
	c.note()
	if got := c.silent(); got > 10*time.Millisecond {
		t.Fatalf("silent() = %v right after a read", got)
	}
}
