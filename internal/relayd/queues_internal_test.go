package relayd

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/walbox/walbox/publisher"
)

// Each session tells of its queues: a queue it cannot declare is logged once however many
// sessions fail to, a row waiting for the park queue is logged once however often Park retries,
// and both end when a session declares that queue. The real-server case is TestClusterFaults.
func TestQueueWatchLogsEachChangeOnce(t *testing.T) {
	var out bytes.Buffer
	w := newQueueWatch(slog.New(slog.NewTextHandler(&out, nil)), nil)
	count := func(msg string) int { return strings.Count(out.String(), msg) }
	down := errors.New("home node is down")
	park, alt := "outbox.parked", "outbox.unroutable"
	check := func(step string, parkDown, altDown, waiting bool, downLogs, waitLogs, backLogs int) {
		t.Helper()
		u := w.unavailable()
		if u[park] != parkDown || u[alt] != altDown || w.parkWaiting() != waiting {
			t.Errorf("%s: unavailable %v, waiting %v; want park %v, alternate %v, waiting %v", step, u, w.parkWaiting(),
				parkDown, altDown, waiting)
		}
		for _, c := range []struct {
			msg  string
			want int
		}{{"cannot declare a queue", downLogs}, {"a row waits to be parked", waitLogs}, {"queue declared again", backLogs}} {
			if got := count(c.msg); got != c.want {
				t.Errorf("%s: %d %q logs, want %d:\n%s", step, got, c.msg, c.want, out.String())
			}
		}
	}

	w.observe(publisher.QueueState{Queue: park, Type: "quorum"})
	w.observe(publisher.QueueState{Queue: alt, Type: "quorum"})
	check("both declared", false, false, false, 0, 0, 0)
	w.observe(publisher.QueueState{Queue: park, Type: "classic", Err: down})
	w.observe(publisher.QueueState{Queue: alt, Type: "classic", Err: down})
	w.observe(publisher.QueueState{Queue: park, Type: "classic", Err: down})
	check("both down, twice", true, true, false, 2, 0, 0)
	for range 3 {
		w.observe(publisher.QueueState{Queue: park, Type: "classic", Err: down, Waiting: true})
	}
	check("a row waits", true, true, true, 2, 1, 0)
	w.observe(publisher.QueueState{Queue: alt, Type: "classic"})
	check("the alternate queue back", true, false, true, 2, 1, 1)
	w.observe(publisher.QueueState{Queue: park, Type: "classic"})
	check("the park queue back", false, false, false, 2, 1, 2)

	w.observe(publisher.QueueState{Queue: park, Type: "quorum", OtherType: true})
	w.observe(publisher.QueueState{Queue: park, Type: "quorum", OtherType: true})
	w.observe(publisher.QueueState{Queue: alt, Type: "classic", OtherType: true})
	if got := count("is not a quorum queue"); got != 1 {
		t.Errorf("%d warnings of a queue kept as classic, want 1 (the park queue, asked as quorum):\n%s", got, out.String())
	}
	w.observe(publisher.QueueState{Queue: alt, Type: "quorum", OtherArgument: "x-max-length"})
	w.observe(publisher.QueueState{Queue: alt, Type: "quorum", OtherArgument: "x-max-length"})
	if got := count("exists with other arguments than walbox declares"); got != 1 || !strings.Contains(out.String(), "argument=x-max-length") {
		t.Errorf("%d warnings of a queue kept with other arguments, want 1 naming x-max-length:\n%s", got, out.String())
	}
}
