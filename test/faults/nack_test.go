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
// loss no relay can see (docs/reliability.md, "Broker nacks"). So the full queue is not the one read.
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
	if n := v.Count(); n >= 1000 {
		t.Fatalf("the consumers got %d messages while the broker nacked: want fewer than the 1,000 rows", n)
	}
	// The operator clears the full queue; the relay must deliver everything.
	if _, err := ch.QueueDelete(full, false, false, false); err != nil {
		t.Fatal(err)
	}
	w.verdict(cw, v, 2*time.Minute, 1, 1, "sessions_while_full="+itoa(int(st.Sessions)))
}
