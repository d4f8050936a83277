package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// Transactions mix table rows and messages written through walbox_emit, a fifth of them rolled
// back, while the relay is SIGKILLed at random moments: nothing committed is lost, nothing
// rolled back is published, and first deliveries keep commit order across both kinds.
func TestTablelessRelayKilled(t *testing.T) {
	heavy(t)
	rounds := soakInt("WALBOX_SOAK_ROUNDS", 8, 100)
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("WALBOX_FAULT_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (WALBOX_FAULT_SEED repeats the kill moments and the workload), %d rounds", seed, rounds)
	rng := rand.New(rand.NewPCG(seed, 2))

	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	v := w.startVerifier()
	wr := w.startWriter(checker.WriterConfig{Seed: seed, MaxTx: 30, Pause: 10 * time.Millisecond, Emit: 0.5, Rollback: 0.2})
	for range rounds {
		r := w.startRelay()
		time.Sleep(time.Duration(rng.Int64N(int64(1500 * time.Millisecond))))
		r.Kill()
	}
	wr.stop()
	w.startRelay()
	rep := w.verdict(wr.Writer, v, 3*time.Minute, rounds, rounds, "")
	st := wr.Stats()
	emitted := 0
	for _, r := range wr.Committed() {
		if r.Emitted {
			emitted++
		}
	}
	t.Logf("%d rows committed, %d of them emitted without a row; %d transactions rolled back on purpose",
		rep.Committed, emitted, st.RolledBack)
	if emitted == 0 || emitted == rep.Committed || st.RolledBack == 0 {
		t.Errorf("the workload did not mix: %d of %d rows emitted, %d rollbacks", emitted, rep.Committed, st.RolledBack)
	}
	var n int
	if err := w.conn.QueryRow(context.Background(), "SELECT count(*) FROM outbox").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != rep.Committed-emitted {
		t.Errorf("outbox has %d rows, want the %d committed table rows only", n, rep.Committed-emitted)
	}
}

// A row and an emitted message with the same fields, in one transaction (so the same
// created_at), reach the broker as the same message: body and every property and header.
func TestEmittedMessageIsTheRowOnTheWire(t *testing.T) {
	heavy(t)
	emittedMessageIsTheRow(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
}

func emittedMessageIsTheRow(t *testing.T, pg *testenv.Postgres, rabbit *testenv.Rabbit) {
	w := newWorld(t, pg, rabbit)
	const id = "0190f5a2-7c3e-7def-8a1b-123456789abc"
	headers := `{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "k": [1, "a"], "b": true}`
	ctx := context.Background()
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, headers)
		VALUES ($1, 'order', '42', 'order.created', '{"n": 1, "s": "x"}', $2)`, id, headers); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT walbox_emit('order', '42', 'order.created', '{"n": 1, "s": "x"}', $2, $1)`, id, headers); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	w.startRelay()
	conn, ch := dialAMQP(t, w.rabbit.URL())
	defer conn.Close()
	var got []amqp.Delivery
	waitFor(t, 30*time.Second, "both messages", func() bool {
		d, ok, err := ch.Get(w.queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = append(got, d)
		}
		return len(got) >= 2
	})
	if len(got) != 2 {
		t.Fatalf("got %d messages, want 2", len(got))
	}
	a, b := wire(got[0]), wire(got[1])
	if a.MessageId != id || a.Type != "order.created" || a.Headers["aggregate_id"] != "42" {
		t.Fatalf("the row arrived as %+v", a)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("the row and the emitted message differ on the wire:\n row     %+v\n emitted %+v", a, b)
	}
}

// wire is what a consumer sees of a delivery, without what differs per delivery.
func wire(d amqp.Delivery) amqp.Delivery {
	return amqp.Delivery{Headers: d.Headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: d.DeliveryMode, Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo,
		Expiration: d.Expiration, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, UserId: d.UserId,
		AppId: d.AppId, Exchange: d.Exchange, RoutingKey: d.RoutingKey, Body: d.Body}
}

// A message with walbox's prefix that is not transactional was sent whether or not its
// transaction committed (this one rolled back), and a malformed one can never be delivered: both
// are parked with the reason, never published; messages of other prefixes are left alone.
func TestRejectedMessagesAreParked(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	const (
		before, after     = "00000000-0000-4000-8000-00000000b001", "00000000-0000-4000-8000-00000000b003"
		nonTx, malformed  = "00000000-0000-4000-8000-00000000b002", "00000000-0000-4000-8000-00000000b004"
		content           = `{"v": 1, "id": "%s", "aggregate_type": "order", "aggregate_id": "1", "event_type": "order.created", "payload": {}}`
		emitWithID        = `SELECT walbox_emit('order', '1', 'order.created', '{}', '{}', $1)`
		emitNonTxRollback = `SELECT pg_logical_emit_message(false, 'walbox', format($1::text, $2::text))`
	)
	ctx := context.Background()
	w.exec(emitWithID, before)
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, emitNonTxRollback, content, nonTx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	w.exec(`SELECT pg_logical_emit_message(true, 'walbox', format($1::text, $2::text)::text || 'trailing garbage')`, content, malformed)
	w.exec(`SELECT pg_logical_emit_message(true, 'walbox.other', 'not ours')`)
	w.exec(emitWithID, after)

	conn, ch := dialAMQP(t, w.rabbit.URL())
	defer conn.Close()
	var ids []string
	waitFor(t, 30*time.Second, "the two committed messages", func() bool {
		d, ok, err := ch.Get(w.queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			ids = append(ids, d.MessageId)
		}
		return len(ids) >= 2
	})
	time.Sleep(time.Second) // anything published by mistake arrives meanwhile
	parked := w.drainQueue(w.exchange + ".parked")
	rest := w.drainQueue(w.queue)
	if !reflect.DeepEqual(ids, []string{before, after}) || len(rest) != 0 {
		t.Errorf("published %v and then %d more, want exactly %s then %s", ids, len(rest), before, after)
	}
	for id, reason := range map[string]string{nonTx: "not transactional", malformed: "content is not a JSON object"} {
		d, ok := parked[id]
		switch {
		case !ok && id == malformed:
			// Parked without an id: find it by its reason.
			found := false
			for _, p := range parked {
				found = found || strings.Contains(fmt.Sprint(p.Headers["x-walbox-reason"]), reason)
			}
			if !found {
				t.Errorf("no parked message with reason %q among %d parked", reason, len(parked))
			}
		case !ok:
			t.Errorf("message %s was not parked (parked: %d)", id, len(parked))
		case !strings.Contains(fmt.Sprint(d.Headers["x-walbox-reason"]), reason):
			t.Errorf("message %s parked with reason %q, want it to mention %q", id, d.Headers["x-walbox-reason"], reason)
		}
	}
	if len(parked) != 2 {
		t.Errorf("%d messages parked, want 2", len(parked))
	}
}

// Messages written through walbox_emit have no row, so walbox recover cannot republish those of
// a gap: after a lost slot it says so, in the dry run and in the recovery, rather than reporting
// only the rows it republished as if the gap were closed.
func TestRecoverSaysEmittedMessagesOfTheGapAreGone(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	w.exec(`SELECT walbox_emit('order', '1', 'order.created', '{}')`)
	w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'order.paid', '{}')`)
	time.Sleep(500 * time.Millisecond)
	w.dropSlot()
	w.expectRefusal(r, "will not recreate")
	w.exec(`SELECT walbox_emit('order', '1', 'order.shipped', '{}')`) // in the gap: gone for good

	for _, args := range [][]string{{"recover", "--dry-run"}, {"recover"}} {
		out, code := w.walbox(nil, args...)
		if code != 0 {
			t.Fatalf("walbox %v exited %d:\n%s", args, code, out)
		}
		if !strings.Contains(out, "walbox_emit") || !strings.Contains(out, "cannot be republished") {
			t.Errorf("walbox %v does not say that messages emitted in the gap cannot be republished:\n%s", args, out)
		}
	}
}
