package faults_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// badRow is one kind of row that can never be delivered as written.
type badRow struct {
	kind      string
	eventType any // nil for NULL
	payload   string
	reason    string // in the parked copy's x-walbox-reason; "" for unroutable rows
}

var badRows = []badRow{
	{kind: "null event_type", eventType: nil, payload: `{}`, reason: "event_type is NULL"},
	{kind: "empty event_type", eventType: "", payload: `{}`, reason: "event_type is empty"},
	{kind: "payload not JSON", eventType: "checker.bad", payload: `{"not": json`, reason: "payload is not JSON"},
	{kind: "over max message size", eventType: "checker.big", payload: `{"x": "` + strings.Repeat("y", 5000) + `"}`, reason: "4096"},
	{kind: "unroutable", eventType: "nobody.listens", payload: `{}`},
}

// Bad rows land between the writer's rows while the stream is busy. Each is parked on
// <exchange>.parked with the reason in x-walbox-reason, or, if no queue is bound for it, routed
// to <exchange>.unroutable; none reaches the consumers' queue, and the stream moves on: every
// good row arrives, in order.
//
// The table is made to admit such rows: event_type nullable, payload text rather than jsonb.
func TestBadRowsUnderLoad(t *testing.T) {
	heavy(t)
	perKind := soakInt("WALBOX_SOAK_BAD_ROWS", 5, 50)
	w := newWorldBound(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t), "checker.#")
	ctx := context.Background()
	if _, err := w.conn.Exec(ctx, `ALTER TABLE outbox ALTER COLUMN event_type DROP NOT NULL,
		ALTER COLUMN payload TYPE text`); err != nil {
		t.Fatal(err)
	}
	v := w.startVerifier()
	wr := w.startWriter(checker.WriterConfig{Seed: 71, Pause: 10 * time.Millisecond})
	r := w.startRelay("WALBOX_MAX_MESSAGE_SIZE=4096")
	r.waitState("streaming", time.Minute)

	written := map[string]badRow{} // id -> kind
	for i := range perKind * len(badRows) {
		b := badRows[i%len(badRows)]
		id := uuid.NewString()
		if _, err := w.conn.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1, 'bad', $2, $3, $4)`, id, b.kind, b.eventType, b.payload); err != nil {
			t.Fatalf("insert %s: %v", b.kind, err)
		}
		written[id] = b
		time.Sleep(30 * time.Millisecond)
	}
	w.progress(v, 200, time.Minute)
	wr.stop()
	rep := w.verdict(wr.Writer, v, 2*time.Minute, 1, len(written), "")
	if rep.Phantom > 0 {
		t.Error("bad rows reached the consumers' queue (counted as phantoms)")
	}

	parked := w.drainQueue(w.exchange + ".parked")
	unroutable := w.drainQueue(w.exchange + ".unroutable")
	got := map[string]int{}
	for id, b := range written {
		where, reason := parked, b.reason
		if b.reason == "" {
			where = unroutable
		}
		d, ok := where[id]
		switch {
		case !ok:
			t.Errorf("%s row %s is in neither the parked nor the unroutable queue", b.kind, id)
		case reason != "" && !strings.Contains(fmt.Sprint(d.Headers["x-walbox-reason"]), reason):
			t.Errorf("%s row %s parked with reason %q, want it to mention %q", b.kind, id, d.Headers["x-walbox-reason"], reason)
		default:
			got[b.kind]++
		}
	}
	st := mustStatus(t, r)
	t.Logf("SUMMARY %s bad_rows=%d parked_found=%d unroutable_found=%d per_kind=%v relay_parked=%d",
		t.Name(), len(written), len(parked), len(unroutable), got, st.Parked)
	if !strings.Contains(r.Output(), "parked") {
		t.Error("no log line about the parked rows")
	}
}

// drainQueue gets every message in queue, by message id.
func (w *world) drainQueue(queue string) map[string]amqp.Delivery {
	w.t.Helper()
	out := map[string]amqp.Delivery{}
	w.eachInQueue(queue, func(d amqp.Delivery) { out[d.MessageId] = d })
	return out
}

// eachInQueue gets every message in queue and calls f with it.
func (w *world) eachInQueue(queue string, f func(amqp.Delivery)) {
	w.t.Helper()
	conn, ch := dialAMQP(w.t, w.rabbit.URL())
	defer conn.Close()
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			w.t.Fatalf("get from %s: %v", queue, err)
		}
		if !ok {
			return
		}
		f(d)
	}
}
