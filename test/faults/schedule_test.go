package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/internal/testenv"
)

// schedulePoints are the kill points of scheduled delivery: a message handed to the schedule, its
// record not yet written; a due batch confirmed, not yet deleted from the schedule.
var schedulePoints = []string{"schedule.handed", "schedule.confirmed"}

// scheduled is a message written due later, as the test wrote it.
type scheduled struct {
	id        string
	deliverAt time.Time
	cancelled bool
}

// arrival notes when a message first arrived, and how many times.
type arrival struct {
	first time.Time
	count int
}

// consumeArrivals consumes the world's queue and notes every message's arrivals by id.
func (w *world) consumeArrivals() func() map[string]arrival {
	w.t.Helper()
	conn, ch := dialAMQP(w.t, w.rabbit.URL())
	w.t.Cleanup(func() { conn.Close() })
	ds, err := ch.Consume(w.queue, "", true, true, false, false, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]arrival{}
	go func() {
		for d := range ds {
			mu.Lock()
			a := got[d.MessageId]
			if a.count == 0 {
				a.first = time.Now()
			}
			a.count++
			got[d.MessageId] = a
			mu.Unlock()
		}
	}()
	return func() map[string]arrival {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string]arrival, len(got))
		for k, v := range got {
			out[k] = v
		}
		return out
	}
}

// writeScheduled writes n messages due from lead to lead+7 s on, by the server's clock: table rows,
// rows deleted in their own transaction, and walbox_emit messages, a third each.
func (w *world) writeScheduled(n int, lead time.Duration) []scheduled {
	w.t.Helper()
	ctx := context.Background()
	var out []scheduled
	err := pgx.BeginFunc(ctx, w.conn, func(tx pgx.Tx) error {
		for i := range n {
			var s scheduled
			due := fmt.Sprintf("pg_catalog.clock_timestamp() + interval '%d milliseconds' + $1::int * interval '100 milliseconds'", lead.Milliseconds())
			var q string
			switch i % 3 {
			case 0, 1:
				q = "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, deliver_at) " +
					"VALUES ('order', $1::int::text, 'order.reminder', '{}', " + due + ") RETURNING id::text, deliver_at"
			default:
				q = "SELECT m.id::text, m.at FROM (SELECT " + due + " AS at) d, LATERAL (SELECT walbox_emit('order', $1::int::text, " +
					"'order.reminder', '{}', '{}', NULL, NULL, d.at) AS id, d.at) m"
			}
			if err := tx.QueryRow(ctx, q, i%70).Scan(&s.id, &s.deliverAt); err != nil {
				return err
			}
			if i%3 == 1 {
				if _, err := tx.Exec(ctx, "DELETE FROM outbox WHERE id = $1::uuid", s.id); err != nil {
					return err
				}
			}
			out = append(out, s)
		}
		return nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return out
}

// waitArrived waits until each of msgs arrived at least once, and fails the test after within.
func waitArrived(t *testing.T, arrivals func() map[string]arrival, msgs []scheduled, within time.Duration, what string) {
	t.Helper()
	waitFor(t, within, what, func() bool {
		got := arrivals()
		for _, m := range msgs {
			if got[m.id].count == 0 {
				return false
			}
		}
		return true
	})
}

// cancel cancels the message through walbox_cancel and returns what it said.
func (w *world) cancel(id string) bool {
	w.t.Helper()
	var waiting bool
	if err := w.conn.QueryRow(context.Background(), "SELECT walbox_cancel($1)", id).Scan(&waiting); err != nil {
		w.t.Fatal(err)
	}
	return waiting
}

// Scheduled messages wait in the schedule through SIGKILLs of walbox: at the hand-over to the
// schedule, between a due batch's confirm and its delete, at random moments, and of the active
// relay with a standby waiting. None is lost, none leaves before its deliver_at, and none that was
// cancelled leaves. Some are cancelled before any relay read them, some while they wait.
func TestScheduledMessagesSurviveKills(t *testing.T) {
	heavy(t)
	pg := testenv.StartPostgres(t, testenv.WithSetting("wal_sender_timeout", "3s"))
	testenv.RequireOwn(t, pg)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	arrivals := w.consumeArrivals()
	// Due 20 s on: no relay may send one before the test cancels it. A kill between a send's
	// confirm and its delete lets a cancel say true for a message that left (docs/outbox.md).
	msgs := w.writeScheduled(90, 20*time.Second)
	for i := 0; i < len(msgs); i += 15 { // a tombstone: no relay has read them yet
		if !w.cancel(msgs[i].id) {
			t.Fatalf("walbox_cancel of %s before any relay ran: false, want true", msgs[i].id)
		}
		msgs[i].cancelled = true
	}

	w.killRunAt("schedule.handed", 1)
	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	waitFor(t, time.Minute, "every message recorded", func() bool {
		var n int
		return w.conn.QueryRow(context.Background(), "SELECT pg_catalog.count(*) FROM walbox_schedule").Scan(&n) == nil && n == 84
	})
	r.Kill()
	for i := 7; i < len(msgs); i += 15 { // recorded and waiting
		if !w.cancel(msgs[i].id) {
			t.Fatalf("walbox_cancel of %s while it waits: false, want true", msgs[i].id)
		}
		msgs[i].cancelled = true
	}
	w.killRunAt("schedule.confirmed", 1)
	rng := rand.New(rand.NewPCG(38, 1))
	for range 3 {
		r := w.startRelay()
		time.Sleep(time.Duration(200+rng.IntN(1300)) * time.Millisecond)
		r.Kill()
	}
	active := w.startRelay()
	active.waitState("streaming", time.Minute)
	standby := w.startRelay()
	standby.waitState("standby", time.Minute)
	active.Kill()
	standby.waitState("streaming", time.Minute)

	want := 0
	for _, m := range msgs {
		if !m.cancelled {
			want++
		}
	}
	waitFor(t, 2*time.Minute, "every message not cancelled delivered", func() bool {
		got := arrivals()
		n := 0
		for _, m := range msgs {
			if a := got[m.id]; a.count > 0 && !m.cancelled {
				n++
			}
		}
		return n == want
	})
	waitFor(t, time.Minute, "the schedule empty", func() bool {
		var n int
		return w.conn.QueryRow(context.Background(), "SELECT pg_catalog.count(*) FROM walbox_schedule").Scan(&n) == nil && n == 0
	})
	time.Sleep(time.Second)
	got := arrivals()
	dups := 0
	for _, m := range msgs {
		a := got[m.id]
		switch {
		case m.cancelled && a.count > 0:
			t.Errorf("cancelled message %s arrived %d times", m.id, a.count)
		case !m.cancelled && a.first.Before(m.deliverAt):
			t.Errorf("message %s arrived %s before its deliver_at", m.id, m.deliverAt.Sub(a.first))
		}
		dups += max(a.count-1, 0)
	}
	if len(got) != want {
		t.Errorf("%d distinct messages arrived, want %d", len(got), want)
	}
	if w.cancel(msgs[1].id) {
		t.Errorf("walbox_cancel of %s after it was sent: true, want false", msgs[1].id)
	}
	t.Logf("%d messages delivered, %d duplicates after the kills, %d cancelled", want, dups, len(msgs)-want)
}

// walbox recover republishes a gap whose rows are due later into the schedule, not to the broker:
// none leaves early. walbox run then sends each at its time. The rows deleted in their own
// transaction are not in the table, and recover cannot see them (docs/operations.md).
func TestRecoverSchedulesRowsDueLater(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	arrivals := w.consumeArrivals()
	var kept []scheduled
	for i, m := range w.writeScheduled(30, 5*time.Second) {
		if i%3 == 0 { // a table row, kept in the table
			kept = append(kept, m)
		}
	}
	w.dropSlot()
	out, code := w.walbox(nil, "recover", "--accept-loss") // the deleted rows are gone, as for any gap
	if code != 0 || !strings.Contains(out, "10 of them have a deliver_at") {
		t.Fatalf("walbox recover exited %d; want 0 and 10 rows with a deliver_at:\n%s", code, out)
	}
	var n int
	if err := w.conn.QueryRow(context.Background(), "SELECT pg_catalog.count(*) FROM walbox_schedule").Scan(&n); err != nil || n != 10 {
		t.Fatalf("the schedule holds %d messages after recover (%v), want 10", n, err)
	}
	w.startRelay().waitState("streaming", time.Minute)
	waitArrived(t, arrivals, kept, time.Minute, "the recovered rows delivered")
	got := arrivals()
	for _, m := range kept {
		if a := got[m.id]; a.first.Before(m.deliverAt) {
			t.Errorf("recovered message %s arrived %s before its deliver_at", m.id, m.deliverAt.Sub(a.first))
		}
	}
}

// A relay whose role has LOGIN REPLICATION and the grants of walbox migrate --relay-role records,
// sends and deletes scheduled messages. The application's role cancels through walbox_cancel.
func TestScheduledDeliveryAsALeastPrivilegedRelay(t *testing.T) {
	heavy(t)
	w := leastPrivilegedWorld(t)
	arrivals := w.consumeArrivals()
	w.startRelay().waitState("streaming", time.Minute) // it creates the slot: rows before it are not covered
	msgs := w.writeScheduled(9, 5*time.Second)
	if !w.cancel(msgs[4].id) {
		t.Fatalf("walbox_cancel of %s: false, want true", msgs[4].id)
	}
	// A role the owner did not grant walbox_cancel to may not cancel: the relay's, here.
	other, err := pgx.Connect(context.Background(), w.relayDB)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	var pgErr *pgconn.PgError
	if _, err := other.Exec(context.Background(), "SELECT walbox_cancel($1::text)", msgs[5].id); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("walbox_cancel as a role not granted it: %v, want permission denied", err)
	}
	waitFor(t, time.Minute, "the messages not cancelled delivered", func() bool {
		got := arrivals()
		for i, m := range msgs {
			if i != 4 && got[m.id].count == 0 {
				return false
			}
		}
		return true
	})
	got := arrivals()
	for i, m := range msgs {
		a := got[m.id]
		switch {
		case i == 4 && a.count > 0:
			t.Errorf("cancelled message %s arrived", m.id)
		case i != 4 && a.first.Before(m.deliverAt):
			t.Errorf("message %s arrived %s before its deliver_at", m.id, m.deliverAt.Sub(a.first))
		}
	}
}

// Scheduled messages survive a reshard from two shards to three. Those the old relays recorded wait
// under the old slots; once the retire forgot those, the new relays send them. Those written after
// the cut are recorded by both sets, so they may leave twice. None is lost, none leaves early, and
// none written before the cut leaves twice.
func TestScheduledMessagesAcrossAReshard(t *testing.T) {
	heavy(t)
	w := newShardedWorld(t, 2)
	arrivals := w.consumeArrivals()
	old := []*relay{w.startShard(0, 2), w.startShard(1, 2)}
	for _, r := range old {
		r.waitState("streaming", time.Minute)
	}
	soon := w.writeScheduled(9, 2*time.Second)    // due while the old relays run
	later := w.writeScheduled(30, 25*time.Second) // due around or after the retire
	waitArrived(t, arrivals, soon, time.Minute, "the messages due soon")
	if out, code := w.walbox(nil, "reshard", "--shards", "3"); code != 0 {
		t.Fatalf("walbox reshard exited %d:\n%s", code, out)
	}
	if out, code := w.walbox(nil, "reshard", "--shards", "3", "--wait", "90s"); code != 0 {
		t.Fatalf("walbox reshard exited %d:\n%s", code, out)
	}
	for k := range 3 {
		w.startShard(k, 3).waitState("streaming", time.Minute)
	}
	during := w.writeScheduled(30, 10*time.Second) // after the cut: both sets record them
	time.Sleep(2 * time.Second)                    // the old relays record them too
	for _, r := range old {
		if code := r.Stop(30 * time.Second); code != 0 {
			t.Errorf("old relay exited %d", code)
		}
	}
	if out, code := w.walbox(nil, "reshard", "--shards", "3", "--retire"); code != 0 {
		t.Fatalf("walbox reshard --retire exited %d:\n%s", code, out)
	}
	all := append(append(append([]scheduled(nil), soon...), later...), during...)
	waitArrived(t, arrivals, all, 2*time.Minute, "every scheduled message")
	got := arrivals()
	twice := 0
	for i, m := range all {
		a := got[m.id]
		if a.first.Before(m.deliverAt) {
			t.Errorf("message %s arrived %s before its deliver_at", m.id, m.deliverAt.Sub(a.first))
		}
		if a.count > 1 && i < len(soon)+len(later) {
			t.Errorf("message %s, written before the cut, arrived %d times", m.id, a.count)
		}
		if a.count > 1 {
			twice++
		}
	}
	waitFor(t, time.Minute, "the schedule empty", func() bool {
		var left string
		err := w.conn.QueryRow(context.Background(), `SELECT pg_catalog.count(*)::text || ': ' || coalesce(pg_catalog.string_agg(slot_name || ' ' || message_id || ' due ' ||
			(deliver_at - pg_catalog.now())::text, ', '), '') || ' / slots: ' || (SELECT pg_catalog.string_agg(slot_name, ' ') FROM walbox_slots)
			FROM walbox_schedule`).Scan(&left)
		t.Logf("schedule: %s (%v)", left, err)
		return err == nil && strings.HasPrefix(left, "0:")
	})
	t.Logf("%d scheduled messages across the reshard, %d of those after the cut arrived twice", len(all), twice)
}
