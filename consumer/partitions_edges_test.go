package consumer_test

import (
	"context"
	"testing"
	"time"
)

// A message that Skip discarded stays discarded when a copy of it comes: the relay delivers at
// least once. Handling the copy would also put it after its aggregate's later messages.
func TestSkippedMessageStaysSkippedWhenDeliveredAgain(t *testing.T) {
	e := newPartEnv(t, nil)
	cfg := e.partConfig(1)
	e.fail(t, msgID("agg0", 1))
	c := e.runOne(t, e.pool, cfg)
	aggs := aggregates(1)
	e.publishAggregates(t, aggs, 1, 2)
	e.waitFailed(t, "agg0")
	if err := c.Skip(context.Background(), "agg0"); err != nil {
		t.Fatal(err)
	}
	e.waitHandled(t, 1, time.Minute)
	e.unfail(t, msgID("agg0", 1)) // the copy would be handled now
	e.publishAggregates(t, aggs, 1, 1)
	e.publishAggregates(t, aggs, 3, 3) // one partition: handled after the copy
	eventually(t, time.Minute, "agg0-3 handled", func() bool {
		return e.count(t, "SELECT count(*) FROM handled WHERE message_id = 'agg0-3'") == 1
	})
	e.checkHandled(t, aggs, 3, map[string]bool{"agg0-1": true})
}
