package relayd

import (
	"log/slog"
	"maps"
	"sync"

	"github.com/walbox/walbox/publisher"
)

// queueWatch follows the park and alternate queues the sessions declare. A session does not need
// them to publish. So a queue that cannot be declared (a classic queue whose node is down) is
// logged once. The metric walbox_queue_unavailable shows it until a session declares it. A row to
// park while its queue cannot be declared waits, and the slot does not move past it. That is logged
// once, and walbox_park_waiting is 1 meanwhile.
//
// A relay that becomes a standby waits for no row. The process that took the slot over does, and
// says so itself.
type queueWatch struct {
	log     *slog.Logger
	standby func() bool // the relay waits as a standby; nil: never

	mu      sync.Mutex
	down    map[string]bool // queues by name: the last declaration failed
	waiting string          // the park queue a row waits for; "" while none waits
	typed   map[string]bool // queues already logged as kept with another type or other arguments
}

func newQueueWatch(log *slog.Logger, standby func() bool) *queueWatch {
	return &queueWatch{log: log, standby: standby, down: map[string]bool{}, typed: map[string]bool{}}
}

// observe takes one session's news of a queue; it is the sessions' OnQueue.
func (w *queueWatch) observe(st publisher.QueueState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case st.Waiting:
		if w.waiting == "" {
			w.log.Warn("a row waits to be parked: its queue cannot be declared, and the slot does not move past the row; "+
				"walbox goes on once the queue is back (on a cluster, use quorum queues: --queue-type)",
				"queue", st.Queue, "error", st.Err)
		}
		w.waiting, w.down[st.Queue] = st.Queue, true
	case st.Err != nil:
		if !w.down[st.Queue] {
			w.log.Warn("cannot declare a queue; walbox publishes without it, and a row to park there waits for it",
				"queue", st.Queue, "error", st.Err)
		}
		w.down[st.Queue] = true
	default:
		if w.down[st.Queue] {
			w.log.Info("queue declared again", "queue", st.Queue, "a_row_waited", w.waiting == st.Queue)
		}
		if w.waiting == st.Queue {
			w.waiting = ""
		}
		w.down[st.Queue] = false
		switch {
		case w.typed[st.Queue]:
		case st.OtherType && st.Type == publisher.QueueQuorum:
			w.typed[st.Queue] = true
			w.log.Warn("queue is not a quorum queue, though walbox is given several brokers: while its node is down, "+
				"nothing can be parked; walbox doctor says how to replace it", "queue", st.Queue)
		case st.OtherArgument != "":
			w.typed[st.Queue] = true
			w.log.Warn("queue exists with other arguments than walbox declares; walbox uses it as it is",
				"queue", st.Queue, "argument", st.OtherArgument, "declared_as", st.Type)
		}
	}
}

// unavailable returns each queue seen, and whether it cannot be declared now.
func (w *queueWatch) unavailable() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.down)
}

// parkWaiting reports whether a row waits for its park queue.
func (w *queueWatch) parkWaiting() bool { return w.waitingFor() != "" }

// waitingFor returns the park queue a row waits for, "" while none does (and on a nil watch).
// The session that waited ended when the relay became a standby: no row waits then.
func (w *queueWatch) waitingFor() string {
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.standby != nil && w.standby() {
		w.waiting = ""
	}
	return w.waiting
}
