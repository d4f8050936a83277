package faults_test

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// The consumers' queue is full (x-max-length with overflow reject-publish), so the broker nacks.
// A nack is transient: walbox must end the session, retry from the slot with backoff for as long
// as it takes, never skip the message, and deliver everything once the consumers catch up.
func TestNackedMessagesAreRetried(t *testing.T) {
	heavy(t)
	t.Parallel() // mostly waits
	rabbit := testenv.SharedRabbit(t)
	w := newWorldWith(t, testenv.SharedPostgres(t), rabbit, "#", amqp.Table{"x-max-length": int64(100), "x-overflow": "reject-publish"})
	cw := w.newWriter(checker.WriterConfig{Seed: 95, MaxRows: 1000})
	if err := cw.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := w.startRelay()
	// Nobody consumes yet: the queue fills at 100 and the broker nacks the rest.
	waitFor(t, time.Minute, "the relay to meet a nack", func() bool {
		st, err := r.status()
		return err == nil && strings.Contains(st.LastError, "nack")
	})
	time.Sleep(3 * time.Second) // a few more rounds of nack, backoff and replay
	st := mustStatus(t, r)
	if r.Exited() || st.Sessions < 2 {
		t.Fatalf("after nacks: relay exited %t, status %+v; want it retrying in new sessions", r.Exited(), st)
	}
	v := w.startVerifier()
	w.verdict(cw, v, 2*time.Minute, 1, 1, "sessions_while_full="+itoa(int(st.Sessions)))
}
