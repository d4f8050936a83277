package doctor

import (
	"context"
	"testing"
	"time"
)

// Status bounds its stream checks as a whole. A slot's check that runs out of time must not hide
// the verdicts found before it: a restored server found on one shard's slot still fails status.
// Only when no check ended did the stream's node not answer.
func TestWithinBoundKeepsTheVerdictsFoundBeforeIt(t *testing.T) {
	slow := func(ctx context.Context, emit func(Check)) {
		emit(passCheck("stream_broker", "RabbitMQ stream at h:1 accepts the connection"))
		emit(failCheck("stream_anchor", anchorFix, "slot s_s0of2: the stream holds rows this server's WAL does not have"))
		<-ctx.Done() // the next slot's peek runs out of time
	}
	got := withinBound(t.Context(), 200*time.Millisecond, "h:1", slow)
	want := []struct{ name, status string }{{"stream_broker", "pass"}, {"stream_anchor", "fail"}, {"stream_anchor", "warn"}}
	if len(got) != len(want) {
		t.Fatalf("got %d checks, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Name != w.name || got[i].Status != w.status {
			t.Errorf("check %d: %s %s, want %s %s: %s", i, got[i].Name, got[i].Status, w.name, w.status, got[i].Message)
		}
	}

	silent := func(ctx context.Context, _ func(Check)) { <-ctx.Done() }
	got = withinBound(t.Context(), 100*time.Millisecond, "h:1", silent)
	if len(got) != 1 || got[0].Name != "stream_broker" || got[0].Status != "fail" {
		t.Errorf("no check ended: %+v, want one failed stream_broker", got)
	}
}
