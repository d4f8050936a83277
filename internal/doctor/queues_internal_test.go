package doctor

import (
	"errors"
	"strings"
	"testing"

	"github.com/walbox/walbox/publisher"
)

// The verdict on a park or alternate queue, from what the session told of it: the real-server
// cases are in TestClusterFaults (a classic queue on a cluster) and the e2e doctor tests.
func TestQueueCheckVerdicts(t *testing.T) {
	one, three := make([]publisher.Config, 1), make([]publisher.Config, 3)
	for _, tt := range []struct {
		name    string
		brokers []publisher.Config
		st      *publisher.QueueState // nil: no answer yet
		status  string
		says    string
	}{
		{"quorum on a cluster", three, &publisher.QueueState{Type: "quorum"}, "pass", "(quorum)"},
		{"classic with one URL", one, &publisher.QueueState{Type: "classic"}, "pass", "set --queue-type quorum"},
		{"an existing classic one on a cluster", three, &publisher.QueueState{Type: "quorum", OtherType: true}, "fail", "not a quorum queue"},
		{"an existing quorum one with one URL", one, &publisher.QueueState{Type: "classic", OtherType: true}, "pass", "keeps it"},
		{"other arguments on a cluster", three, &publisher.QueueState{Type: "quorum", OtherArgument: "x-max-length"}, "warn",
			"another x-max-length than walbox declares; walbox uses it as it is, and cannot tell its type"},
		{"other arguments with one URL", one, &publisher.QueueState{Type: "classic", OtherArgument: "x-max-length"}, "pass",
			"another x-max-length"},
		{"classic asked for on a cluster", three, &publisher.QueueState{Type: "classic"}, "warn", "--queue-type classic"},
		{"cannot be declared", three, &publisher.QueueState{Type: "quorum", Err: errors.New("home node is down")}, "fail", "home node is down"},
		{"no answer", one, nil, "warn", "no answer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			qs := &queueStates{}
			if tt.st != nil {
				st := *tt.st
				st.Queue = "outbox.parked"
				qs.add(st)
			}
			c := doctor{brokers: tt.brokers}.queueCheck("park_queue", "outbox.parked", qs)
			if c.Status != tt.status || !strings.Contains(c.Message, tt.says) {
				t.Errorf("%s %q, want %s saying %q", c.Status, c.Message, tt.status, tt.says)
			}
		})
	}
}
