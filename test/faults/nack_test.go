package faults_test

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// A queue bound beside the consumers' queue is full (x-max-length with overflow reject-publish),
// so the broker nacks every message. A nack is transient: walbox must end the session, retry
// from the slot with backoff for as long as it takes, never skip the message, and deliver
// everything once an operator clears the full queue.
//
// The consumers read a queue without a limit. On RabbitMQ 3.10 a classic queue with x-max-length
// and reject-publish, read while it fills, confirms some messages and then drops them: a broker
// loss no relay can see (docs/reliability.md, "A broker that confirms and then drops"). So the
// full queue is not the one read. The consumers' queue takes every message, nacked or not, so it
// has every row long before the queue is cleared. The test therefore checks that each nacked
// message comes again once the full queue is gone: a relay that skipped one, or stopped, fails it.
func TestNackedMessagesAreRetried(t *testing.T) {
	heavy(t)
	t.Parallel() // mostly waits
	rabbit := testenv.SharedRabbit(t)
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	full := testenv.UniqueName("full")
	conn, ch := dialAMQP(t, rabbit.URL())
	defer conn.Close()
	if _, err := ch.QueueDeclare(full, true, false, false, false, amqp.Table{"x-max-length": int64(100), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(full, "#", w.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	cw := w.newWriter(checker.WriterConfig{Seed: 95, MaxRows: 1000})
	if err := cw.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	v := w.startVerifier()
	r := w.startRelay()
	// Nobody reads the full queue: it fills at 100 and the broker nacks the rest.
	waitFor(t, time.Minute, "the relay to meet a nack", func() bool {
		st, err := r.status()
		return err == nil && strings.Contains(st.LastError, "nack")
	})
	time.Sleep(3 * time.Second) // a few more rounds of nack, backoff and replay
	st := mustStatus(t, r)
	if r.Exited() || st.Sessions < 2 || st.State != "stalled" {
		t.Fatalf("after nacks: relay exited %t, status %+v; want it stalled, retrying in new sessions", r.Exited(), st)
	}
	if st.Confirmed > 100 {
		t.Fatalf("while the queue of 100 was full the broker confirmed %d messages, want at most 100", st.Confirmed)
	}
	// What the consumers got so far, once nothing is left queued. The first 100 are the full
	// queue's; each later one was nacked and must come again.
	seen := -1
	waitFor(t, time.Minute, "the consumers to take what is queued", func() bool {
		q, err := ch.QueueDeclarePassive(w.queue, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := v.Count()
		settled := q.Messages == 0 && n == seen
		seen = n
		return settled
	})
	before := v.Deliveries()
	// The operator clears the full queue; the relay must send every nacked message again. The
	// consumers already have every row, so the verdict alone would pass before the relay did.
	if _, err := ch.QueueDelete(full, false, false, false); err != nil {
		t.Fatal(err)
	}
	var missing []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		missing = notSentAgain(before, v.Deliveries()[len(before):], 100)
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d nacked messages did not come again within a minute of clearing the full queue, e.g. %v\n%s",
			len(missing), missing[:min(len(missing), 3)], w.relayStates())
	}
	w.verdict(cw, v, 2*time.Minute, 1, 1, "sessions_while_full="+itoa(int(st.Sessions)))
}

// notSentAgain returns the messages that the broker nacked, and so must come again after: those
// in before past the first confirmed (the full queue took those), unless among them, and absent
// from after.
func notSentAgain(before, after []checker.Delivery, confirmed int) []string {
	ok := make(map[string]bool)
	for _, d := range before[:min(confirmed, len(before))] {
		ok[d.ID] = true
	}
	for _, d := range after {
		ok[d.ID] = true
	}
	var missing []string
	for _, d := range before[min(confirmed, len(before)):] {
		if !ok[d.ID] {
			ok[d.ID] = true
			missing = append(missing, d.ID)
		}
	}
	return missing
}
