package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/wire"
)

// queueLog records what a session tells Config.OnQueue.
type queueLog struct {
	mu     sync.Mutex
	states []publisher.QueueState
}

func (l *queueLog) add(st publisher.QueueState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.states = append(l.states, st)
}

// String lists the states, for failures.
func (l *queueLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%+v", l.states)
}

// has reports whether a state of queue matches ok.
func (l *queueLog) has(queue string, ok func(publisher.QueueState) bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, st := range l.states {
		if st.Queue == queue && ok(st) {
			return true
		}
	}
	return false
}

// A park queue that cannot be declared does not stop Dial or Publish: only Park waits for it,
// says so through OnQueue, and parks once it can be declared. Here another connection holds the
// queue exclusively, which refuses the declaration as a classic queue on a dead node does.
func TestParkWaitsForAQueueItCannotDeclare(t *testing.T) {
	r := testenv.SharedRabbit(t)
	exchange := testenv.UniqueName("outbox")
	parked := exchange + ".parked"
	conn, err := amqp.Dial(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	holder, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.QueueDeclare(parked, false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	var log queueLog
	s, _ := dial(t, r.URL(), publisher.Config{Exchange: exchange, OnQueue: log.add})
	if !log.has(parked, func(st publisher.QueueState) bool { return st.Err != nil }) {
		t.Errorf("OnQueue was not told that %s could not be declared: %+v", parked, &log)
	}
	m := newMessage("nobody.listens")
	if seq, c := publish(t, s, m), next(t, s); c.Seq != seq || c.Err != nil {
		t.Fatalf("a publish while the park queue is missing: Confirm %+v, want seq %d acked", c, seq)
	}

	type result struct {
		seq uint64
		err error
	}
	done := make(chan result, 1)
	p := &wire.Parked{Message: *newMessage(""), Reason: "event_type is empty", Table: "public.outbox", LSN: "0/1"}
	go func() {
		seq, err := s.Park(context.Background(), p)
		done <- result{seq, err}
	}()
	deadline := time.Now().Add(time.Minute)
	for !log.has(parked, func(st publisher.QueueState) bool { return st.Waiting }) {
		if time.Now().After(deadline) {
			t.Fatalf("Park never said it waits for %s: %+v", parked, &log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case res := <-done:
		t.Fatalf("Park returned (%d, %v) while its queue could not be declared", res.seq, res.err)
	default:
	}
	conn.Close() // the exclusive queue goes with its connection
	var res result
	select {
	case res = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Park still waits a minute after its queue became free")
	}
	if res.err != nil {
		t.Fatalf("Park: %v", res.err)
	}
	if c := next(t, s); c.Seq != res.seq || c.Err != nil {
		t.Fatalf("parked message: Confirm %+v, want seq %d acked", c, res.seq)
	}
	if d := get(t, admin(t, r.URL()), parked); d.MessageId != p.Message.ID.String() {
		t.Errorf("park queue holds %s, want %s", d.MessageId, p.Message.ID)
	}
	if !log.has(parked, func(st publisher.QueueState) bool { return st.Err == nil && !st.Waiting }) {
		t.Errorf("OnQueue was not told that %s was declared at last: %+v", parked, &log)
	}
}

// QueueType auto is classic with one URL and quorum with several; an existing queue of another
// type is used as it is, where classic or quorum named outright refuse it.
func TestSinkQueueTypeAuto(t *testing.T) {
	for _, tt := range []struct {
		setting string
		urls    int
		want    string
	}{
		{"", 1, "classic"}, {"auto", 1, "classic"}, {"auto", 3, "quorum"},
		{"classic", 3, "classic"}, {"quorum", 1, "quorum"},
	} {
		if got := publisher.SinkQueueType(tt.setting, tt.urls); got != tt.want {
			t.Errorf("sinkQueueType(%q, %d) = %q, want %q", tt.setting, tt.urls, got, tt.want)
		}
	}
	r := testenv.SharedRabbit(t)
	_, exchange := dial(t, r.URL(), publisher.Config{QueueType: "quorum"})
	var log queueLog
	if _, err := publisher.Dial(context.Background(), publisher.Config{URL: r.URL(), Exchange: exchange, OnQueue: log.add}); err != nil {
		t.Fatalf("Dial with auto over quorum queues: %v", err)
	}
	if !log.has(exchange+".parked", func(st publisher.QueueState) bool { return st.OtherType && st.Err == nil }) {
		t.Errorf("auto over a quorum park queue: OnQueue got %+v, want it kept as another type", &log)
	}
}

// A queue the session could not declare is declared again while the session lives, without a
// message to park: OnQueue hears that it is back.
func TestSessionDeclaresAQueueAgainOnceItCan(t *testing.T) {
	r := testenv.SharedRabbit(t)
	exchange := testenv.UniqueName("outbox")
	unroutable := exchange + ".unroutable"
	conn, err := amqp.Dial(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	holder, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.QueueDeclare(unroutable, false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	var log queueLog
	s, _ := dial(t, r.URL(), publisher.Config{Exchange: exchange, OnQueue: log.add})
	if !log.has(unroutable, func(st publisher.QueueState) bool { return st.Err != nil }) {
		t.Fatalf("OnQueue was not told that %s could not be declared: %v", unroutable, &log)
	}
	conn.Close()
	deadline := time.Now().Add(time.Minute)
	for !log.has(unroutable, func(st publisher.QueueState) bool { return st.Err == nil }) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never declared again: %v", unroutable, &log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	m := newMessage("nobody.listens")
	if seq, c := publish(t, s, m), next(t, s); c.Seq != seq || c.Err != nil {
		t.Fatalf("an unroutable message once the alternate queue is back: Confirm %+v, want seq %d acked", c, seq)
	}
	if d := get(t, admin(t, r.URL()), unroutable); d.MessageId != m.ID.String() {
		t.Errorf("alternate queue holds %s, want %s", d.MessageId, m.ID)
	}
}

// On RabbitMQ 4.0 the declaration of a classic queue whose node is down has no answer for over a
// minute, then fails "due to timeout" (3.10 refuses it at once). Meanwhile the queue counts as
// unavailable as soon as Dial gives up waiting for it (for the park and alternate queues side by
// side), and a message to park is told as waiting before the broker's answer, not a minute
// later. Once the node is back, Park parks.
func TestParkWaitIsToldWhileTheDeclarationHasNoAnswer(t *testing.T) {
	if testenv.Short() {
		t.Skip("starts a RabbitMQ 4.0 cluster")
	}
	c := testenv.StartCluster(t, testenv.RabbitVersion("4.0"))
	exchange := testenv.UniqueName("outbox")
	parked, unroutable := exchange+".parked", exchange+".unroutable"
	ch := admin(t, c.URLs()[0])
	for _, q := range []string{parked, unroutable} {
		if err := ch.ExchangeDeclare(q, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q, "", q, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	c.Node(0).Kill(t)
	defer c.StartAll(t)

	var log queueLog
	s, _ := dial(t, c.URLs()[1], publisher.Config{Exchange: exchange, QueueType: publisher.QueueClassic, OnQueue: log.add})
	answered := func(st publisher.QueueState) bool {
		var ae *amqp.Error
		return errors.As(st.Err, &ae)
	}
	if log.has(parked, answered) {
		t.Skipf("the broker answered the declaration of %s within Dial's wait: %v", parked, &log)
	}
	for _, q := range []string{parked, unroutable} {
		if !log.has(q, func(st publisher.QueueState) bool { return st.Err != nil }) {
			t.Errorf("Dial returned without telling that %s has no answer: %v", q, &log)
		}
	}

	done := make(chan error, 1)
	p := &wire.Parked{Message: *newMessage(""), Reason: "event_type is empty", Table: "public.outbox", LSN: "0/1"}
	go func() {
		_, err := s.Park(context.Background(), p)
		done <- err
	}()
	deadline := time.Now().Add(3 * time.Minute)
	for !log.has(parked, func(st publisher.QueueState) bool { return st.Waiting }) {
		if time.Now().After(deadline) {
			t.Fatalf("Park never said it waits for %s: %v", parked, &log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	log.mu.Lock()
	for _, st := range log.states {
		if st.Waiting {
			break
		}
		if answered(st) {
			t.Errorf("Park said it waits only after the broker answered: %+v", log.states)
			break
		}
	}
	log.mu.Unlock()

	c.Node(0).Start(t)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Park: %v", err)
		}
	case <-time.After(5 * time.Minute):
		t.Fatalf("Park still waits five minutes after the queue's node came back: %v", &log)
	}
	if c := next(t, s); c.Err != nil {
		t.Fatalf("parked message: Confirm %+v, want it acked", c)
	}
	t.Logf("told: %v", &log)
}

// A park queue that exists with other arguments than walbox declares (here a quorum queue capped
// by hand with x-max-length) is used as it is, whatever the queue type setting: the broker refuses
// the declaration naming that argument, not the type. Dial failed on it with quorum named
// outright ("exists as another type"), and auto told it as another type (not a quorum queue).
func TestAQueueWithOtherArgumentsIsUsedAsItIs(t *testing.T) {
	r := testenv.SharedRabbit(t)
	for _, queueType := range []string{publisher.QueueQuorum, publisher.QueueAuto} {
		exchange := testenv.UniqueName("outbox")
		parked := exchange + ".parked"
		ch := admin(t, r.URL())
		if err := ch.ExchangeDeclare(parked, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare(parked, true, false, false, false,
			amqp.Table{"x-queue-type": "quorum", "x-max-length": int32(1000)}); err != nil {
			t.Fatal(err)
		}
		var log queueLog
		s, err := publisher.Dial(context.Background(), publisher.Config{URL: r.URL(), Exchange: exchange,
			QueueType: queueType, AlternateExchange: publisher.NoExchange, OnQueue: log.add})
		if err != nil {
			t.Fatalf("--queue-type %s: Dial over a quorum park queue with an x-max-length: %v", queueType, err)
		}
		defer s.Close()
		if !log.has(parked, func(st publisher.QueueState) bool {
			return st.Err == nil && st.OtherArgument == "x-max-length" && !st.OtherType
		}) {
			t.Errorf("--queue-type %s: OnQueue got %v, want the queue kept for its other x-max-length, not another type",
				queueType, &log)
		}
		p := &wire.Parked{Message: *newMessage(""), Reason: "event_type is empty", Table: "public.outbox", LSN: "0/1"}
		seq, err := s.Park(context.Background(), p)
		if err != nil {
			t.Fatalf("--queue-type %s: Park: %v", queueType, err)
		}
		if c := next(t, s); c.Seq != seq || c.Err != nil {
			t.Fatalf("--queue-type %s: parked message: Confirm %+v, want seq %d acked", queueType, c, seq)
		}
		if d := get(t, admin(t, r.URL()), parked); d.MessageId != p.Message.ID.String() {
			t.Errorf("--queue-type %s: park queue holds %s, want %s", queueType, d.MessageId, p.Message.ID)
		}
	}
}
