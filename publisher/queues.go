package publisher

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Types of the park and alternate queues (Config.QueueType).
const (
	// QueueAuto is quorum when Endpoints has more than one URL (the nodes of a cluster), else
	// classic. An existing queue of another type is used as it is.
	QueueAuto = "auto"
	// QueueClassic is a classic queue: it lives on one node.
	QueueClassic = "classic"
	// QueueQuorum is a quorum queue: it survives the loss of a minority of the nodes.
	QueueQuorum = "quorum"
)

// DefaultQueueType is the default of Config.QueueType.
const DefaultQueueType = QueueAuto

// queueWait bounds how long Dial waits for the first declaration of each of the park and alternate
// queues. The declaration goes on after that, and Park waits for it.
const queueWait = 5 * time.Second

// parkRetry is how often Park tries again to declare a park queue it cannot declare.
const parkRetry = time.Second

// queueRetry is how often a session tries again to declare a queue it could not, while nothing
// waits for it.
const queueRetry = 5 * time.Second

// sinkQueueType returns the type the park and alternate queues are declared as. It is for the
// setting queueType with urls broker URLs. Auto is quorum with more than one URL, else classic.
func sinkQueueType(queueType string, urls int) string {
	switch {
	case queueType != QueueAuto && queueType != "":
		return queueType
	case urls > 1:
		return QueueQuorum
	}
	return QueueClassic
}

// QueueState is what a session tells Config.OnQueue about the park or the alternate queue.
type QueueState struct {
	// Queue is the queue's name.
	Queue string
	// Type is the type the session declares it as: QueueClassic or QueueQuorum.
	Type string
	// Err is why the queue could not be declared (its node is down, say). Or it is that its
	// declaration has had no answer yet (errUnanswered). It is nil once declared.
	Err error
	// OtherType is set when the queue exists with another type than QueueType asks for. The queue
	// is then used as it is (QueueType auto only).
	OtherType bool
	// OtherArgument names the argument the broker found different when the queue exists with other
	// arguments than the session declares. An x-max-length set by hand is one, say. The queue is
	// used as it is. Its type is then unknown, since the broker names one difference only.
	OtherArgument string
	// Waiting is set when a message to park waits for the queue: Park holds until it can be
	// declared.
	Waiting bool
}

// sinkQueue is the park or the alternate queue of a session. It is declared on a channel of its
// own, so that a failure closes only that channel. A session does not need its queues to publish:
// only Park waits for the park queue.
type sinkQueue struct {
	name string

	mu      sync.Mutex
	ready   bool
	err     error
	pending chan struct{} // non-nil while a declaration is in flight; closed when it ends
	since   time.Time     // when the declaration in flight began
}

// unansweredFor returns how long the declaration of q in flight has had no answer; 0 when none is
// in flight.
func unansweredFor(q *sinkQueue) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending == nil {
		return 0
	}
	return time.Since(q.since)
}

// errUnanswered marks the state of a queue whose declaration has had no answer for a while. On
// RabbitMQ 4.0, take a classic queue whose node is down. Its declaration fails only after more than
// a minute ("due to timeout"). Until then the queue counts as unavailable.
var errUnanswered = errors.New("no answer from the broker")

// tellUnlessDeclared tells Config.OnQueue st, unless q has been declared meanwhile. It tells
// while it holds q's lock, so the news of a declaration that ends at that moment comes after.
func (s *Session) tellUnlessDeclared(q *sinkQueue, st QueueState) {
	if s.cfg.OnQueue == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ready {
		return
	}
	if errors.Is(st.Err, errUnanswered) {
		if q.pending == nil {
			return // the answer came meanwhile, and was told
		}
		st.Err = fmt.Errorf("declare queue %s: %w for %v", q.name, errUnanswered, time.Since(q.since).Round(time.Second))
	}
	s.cfg.OnQueue(st)
}

// typeMismatch reports whether err is the broker's refusal of a queue declared with another
// type than the existing queue's.
func typeMismatch(err error) bool {
	arg, ok := mismatch(err)
	return ok && (arg == "x-queue-type" || arg == "")
}

// inequivalentArg finds the argument the broker names in its refusal of a declaration.
var inequivalentArg = regexp.MustCompile(`inequivalent arg '([^']+)'`)

// mismatch reports whether err is the broker's refusal of a queue declared with other arguments
// than the existing queue's. It returns the argument the refusal names ("" when it names none). The
// broker checks the other arguments before x-queue-type, and names the first that differs.
func mismatch(err error) (arg string, ok bool) {
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		return "", false
	}
	if m := inequivalentArg.FindStringSubmatch(ae.Reason); m != nil {
		return m[1], true
	}
	return "", true
}

// declareQueues makes the first declaration of the park and alternate queues, side by side. It
// waits for them at most queueWait. A queue that cannot be declared does not fail Dial: its node
// may be down, and Park waits for it. It does fail Dial if it exists as another type than a type
// QueueType names. One whose declaration has no answer by then counts as unavailable:
// Config.OnQueue hears it.
func (s *Session) declareQueues(ctx context.Context) error {
	var qs []*sinkQueue
	for _, q := range []*sinkQueue{s.park, s.alternate} {
		if q != nil {
			s.begin(q) // both at once: each may take queueWait
			qs = append(qs, q)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, queueWait)
	defer cancel()
	for _, q := range qs {
		err := s.ensureQueue(wctx, q)
		var ae *amqp.Error
		if typeMismatch(err) && errors.As(err, &ae) {
			return fmt.Errorf("declare queue %s: it exists as another type than %s; delete it once empty, or match "+
				"the queue type setting: %w", q.name, s.queueType(), ae)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			s.tellUnlessDeclared(q, QueueState{Queue: q.name, Type: s.queueType(), Err: errUnanswered})
		}
	}
	return nil
}

// retryQueues declares again each queue the first declaration could not. It does so every
// queueRetry while the session lives. Config.OnQueue then hears that the queue is back. And a
// message to park later need not wait.
func (s *Session) retryQueues() {
	for _, q := range []*sinkQueue{s.park, s.alternate} {
		if q == nil || s.declared(q) {
			continue
		}
		go func() {
			t := time.NewTicker(queueRetry)
			defer t.Stop()
			for !s.declared(q) {
				select {
				case <-s.dead:
					return
				case <-t.C:
					_ = s.ensureQueue(context.Background(), q) // ends when the session does
				}
			}
		}()
	}
}

// declared reports whether q is declared.
func (s *Session) declared(q *sinkQueue) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ready
}

// queueType is the type the session declares its park and alternate queues as.
func (s *Session) queueType() string {
	n := 1
	if s.cfg.cluster {
		n = 2
	}
	return sinkQueueType(s.cfg.QueueType, n)
}

// ensureQueue declares q unless it is declared already, or waits for the declaration in flight. The
// context ctx ends the wait, not the declaration. That goes on until the broker answers or the
// connection closes.
func (s *Session) ensureQueue(ctx context.Context, q *sinkQueue) error {
	pending := s.begin(q)
	if pending == nil {
		return nil
	}
	select {
	case <-pending:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.dead:
		return s.failure()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ready {
		return nil
	}
	return q.err
}

// begin starts a declaration of q unless q is declared or one is in flight. It returns the
// channel closed when the declaration in flight ends, nil when q is declared.
func (s *Session) begin(q *sinkQueue) chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ready {
		return nil
	}
	if q.pending == nil {
		q.pending, q.since = make(chan struct{}), time.Now()
		go s.declareQueue(q, q.pending)
	}
	return q.pending
}

// declareQueue declares q once, records the outcome, tells Config.OnQueue and closes done.
func (s *Session) declareQueue(q *sinkQueue, done chan struct{}) {
	st := s.declareSinkQueue(q.name)
	q.mu.Lock()
	q.ready, q.err, q.pending = st.Err == nil, st.Err, nil
	q.mu.Unlock()
	if s.cfg.OnQueue != nil {
		s.cfg.OnQueue(st)
	}
	close(done)
}

// declareSinkQueue declares a durable queue named after its fanout exchange, of the session's queue
// type. It binds the queue to that exchange. An existing queue with other arguments (but for
// x-queue-type) is kept as it is (OtherArgument). So is one of another type with QueueType auto
// (OtherType). Either is bound all the same. Each step has a channel of its own: a refusal closes
// the channel. The outcome is what Config.OnQueue is told.
func (s *Session) declareSinkQueue(name string) QueueState {
	st := QueueState{Queue: name, Type: s.queueType()}
	var args amqp.Table
	if st.Type == QueueQuorum {
		args = amqp.Table{"x-queue-type": st.Type}
	}
	err := s.onChannel(func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(name, true, false, false, false, args)
		return err
	})
	if arg, ok := mismatch(err); ok {
		switch {
		case !typeMismatch(err):
			st.OtherArgument, err = arg, nil
		case s.cfg.QueueType == QueueAuto || s.cfg.QueueType == "":
			st.OtherType, err = true, nil
		}
		if err == nil {
			// The broker judged the arguments by its records alone. RabbitMQ 4.0 does so even while
			// the queue's node is down. A passive declaration asks the queue itself.
			err = s.onChannel(func(ch *amqp.Channel) error {
				_, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
				return err
			})
		}
	}
	if err != nil {
		st.Err = fmt.Errorf("declare queue %s: %w", name, err)
		return st
	}
	if err := s.onChannel(func(ch *amqp.Channel) error { return ch.QueueBind(name, "", name, false, nil) }); err != nil {
		st.Err = fmt.Errorf("bind queue %s: %w", name, err)
	}
	return st
}

// onChannel calls f with a channel of its own, closed afterwards.
func (s *Session) onChannel(f func(*amqp.Channel) error) error {
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	return f(ch)
}

// awaitPark waits until the park queue is declared. A parked message published while it cannot be
// (its node is down) would be returned. And the session would be lost. Each failed try tells
// Config.OnQueue that a message waits. So does each call made while a declaration has had no answer
// for parkRetry. ctx ends the wait.
func (s *Session) awaitPark(ctx context.Context) error {
	for {
		if unansweredFor(s.park) >= parkRetry {
			s.tellUnlessDeclared(s.park, QueueState{Queue: s.park.name, Type: s.queueType(), Err: errUnanswered, Waiting: true})
		}
		tctx, cancel := context.WithTimeout(ctx, parkRetry)
		err := s.ensureQueue(tctx, s.park)
		cancel()
		if err == nil {
			return nil
		}
		if f := s.failure(); f != nil {
			return f
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			continue // the declaration in flight goes on; the next turn says so
		}
		s.tellUnlessDeclared(s.park, QueueState{Queue: s.park.name, Type: s.queueType(), Err: err, Waiting: true})
		t := time.NewTimer(parkRetry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-s.dead:
			t.Stop()
			return s.failure()
		}
	}
}
