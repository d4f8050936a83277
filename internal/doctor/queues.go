package doctor

import (
	"fmt"
	"sync"

	"github.com/walbox/walbox/publisher"
)

// queueStates collects what a session tells Config.OnQueue while doctor dials.
type queueStates struct {
	mu     sync.Mutex
	states map[string]publisher.QueueState
}

func (q *queueStates) add(st publisher.QueueState) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.states == nil {
		q.states = map[string]publisher.QueueState{}
	}
	q.states[st.Queue] = st
}

func (q *queueStates) get(name string) (publisher.QueueState, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	st, ok := q.states[name]
	return st, ok
}

// queueChecks judges the park and alternate queues as the session declared them. One that cannot be
// declared holds every row to park. A classic one given several brokers holds them while its node
// is down.
func (d doctor) queueChecks(cfg publisher.Config, qs *queueStates) []Check {
	checks := []Check{d.queueCheck("park_queue", cfg.ParkExchange, qs)}
	if cfg.AlternateExchange != publisher.NoExchange {
		checks = append(checks, d.queueCheck("alternate_queue", cfg.AlternateExchange, qs))
	}
	return checks
}

func (d doctor) queueCheck(name, queue string, qs *queueStates) Check {
	st, ok := qs.get(queue)
	switch {
	case !ok:
		return warnCheck(name, "check the broker's health; a row to park waits until the queue can be declared",
			"queue %s: no answer to its declaration yet", queue)
	case st.Err != nil:
		return failCheck(name, "start the node the queue lives on, or give walbox configure permission on it; on a cluster "+
			"use quorum queues (every node in --amqp-url, or --queue-type quorum)",
			"queue %s cannot be declared: %v. walbox runs, but a row to park waits until it can", queue, st.Err)
	case st.OtherType && st.Type == publisher.QueueQuorum:
		return failCheck(name, fmt.Sprintf("once it is empty, delete it (rabbitmqctl delete_queue %s --if-empty); walbox then "+
			"declares it as quorum. For the park queue a new --park-exchange name works too", queue),
			"queue %s is not a quorum queue, though walbox is given %d brokers: a classic queue lives on one node, "+
				"and while that node is down no row can be parked", queue, len(d.brokers))
	case st.OtherArgument != "" && len(d.brokers) > 1:
		return warnCheck(name, fmt.Sprintf("check its type (rabbitmqctl list_queues name type); if it is classic, delete it "+
			"once empty (rabbitmqctl delete_queue %s --if-empty) and walbox declares it as %s", queue, st.Type),
			"queue %s exists with another %s than walbox declares; walbox uses it as it is, and cannot tell its type", queue,
			st.OtherArgument)
	case st.OtherArgument != "":
		return passCheck(name, "queue %s exists with another %s than walbox declares; walbox uses it as it is", queue,
			st.OtherArgument)
	case st.OtherType:
		return passCheck(name, "queue %s exists with another type than %s; walbox keeps it as it is", queue, st.Type)
	case st.Type == publisher.QueueClassic && len(d.brokers) > 1:
		return warnCheck(name, "use --queue-type auto or quorum, and replace the queue (delete it once empty)",
			"queue %s is classic (--queue-type classic), though walbox is given %d brokers: while its node is down, "+
				"a row to park waits", queue, len(d.brokers))
	case st.Type == publisher.QueueClassic && len(d.brokers) == 1:
		return passCheck(name, "queue %s declared or already there (classic: one broker URL; in front of a cluster, "+
			"set --queue-type quorum)", queue)
	}
	return passCheck(name, "queue %s declared or already there (%s)", queue, st.Type)
}
