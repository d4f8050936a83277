package faults_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
)

// walbox parked, end to end beside a running relay. A row with a reserved header and one over
// --max-message-size are parked, listed and shown. A replay under the same limit parks the large
// one again, with its reason. Once the header is fixed in the table and the limit raised, a
// replay delivers each once, with its original id and the fixed row's headers, and empties the
// park queue. A discard needs --yes; an unknown id or no id at all is one line and exit 2.
func TestParkedRowsListedReplayedDiscarded(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	const small = "WALBOX_MAX_MESSAGE_SIZE=2000"
	r := w.startRelay(small)
	r.waitState("streaming", time.Minute)

	insert := func(eventType, headers, payload string) string {
		id := uuid.NewString()
		w.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, headers)
			VALUES ($1, 'order', '1', $2, $3::jsonb, $4::jsonb)`, id, eventType, payload, headers)
		return id
	}
	first := insert("order.created", `{}`, `{}`)
	bad := insert("order.bad", `{"x-walbox-mine": "1", "trace": "t-1"}`, `{"n": 1}`)
	big := insert("order.big", `{"trace": "t-2"}`, `{"x": "`+strings.Repeat("y", 5000)+`"}`)
	junk := insert("order.bad", `{"x-walbox-other": "2"}`, `{}`)
	last := insert("order.created", `{}`, `{}`)
	if got := w.uniqueIDs(2, time.Minute); got[0] != first || got[1] != last {
		t.Fatalf("delivered %v, want %s then %s", got, first, last)
	}

	var out string
	waitFor(t, time.Minute, "three parked rows listed", func() bool {
		out = w.parked(0, "list")
		return strings.Contains(out, "3 parked messages")
	})
	for _, want := range []string{bad, big, junk, "public.outbox", "x-walbox-mine", "5009", "ID", "PARKED AT"} {
		if !strings.Contains(out, want) {
			t.Errorf("list does not show %q:\n%s", want, out)
		}
	}
	if out := w.parked(0, "show", big); !strings.Contains(out, "payload     not kept (5009 bytes)") ||
		!strings.Contains(out, "x-walbox-reason: ") || !strings.Contains(out, `x-walbox-headers: {"trace":"t-2"}`) {
		t.Errorf("show %s:\n%s", big, out)
	}

	// Bad usage: one line, exit 2, nothing changed.
	for _, args := range [][]string{{"replay"}, {"discard", junk}, {"replay", "no-such-id"}, {"show"}, {"replay", "--all", bad}} {
		out := w.parked(2, args...)
		if strings.Count(strings.TrimSpace(out), "\n") != 0 {
			t.Errorf("walbox parked %v: want one line, got:\n%s", args, out)
		}
	}

	// Still too large: parked again, with its reason.
	if out := w.parked(0, append([]string{"replay", big}, small)...); !strings.Contains(out, "parked "+big+" again") ||
		!strings.Contains(out, "exceeds the maximum of 2000") {
		t.Fatalf("replay under the old limit:\n%s", out)
	}
	w.exec(`UPDATE outbox SET headers = '{"trace": "t-1"}' WHERE id = $1`, bad)
	if out := w.parked(0, "replay", bad, big); strings.Count(out, "from the table row") != 2 {
		t.Fatalf("replay after the fix:\n%s", out)
	}
	got := map[string][]amqp.Delivery{}
	waitFor(t, time.Minute, "the replayed rows", func() bool {
		w.eachInQueue(w.queue, func(d amqp.Delivery) { got[d.MessageId] = append(got[d.MessageId], d) })
		return len(got[bad]) > 0 && len(got[big]) > 0
	})
	time.Sleep(time.Second) // a second delivery would be there by now
	w.eachInQueue(w.queue, func(d amqp.Delivery) { got[d.MessageId] = append(got[d.MessageId], d) })
	for id, trace := range map[string]string{bad: "t-1", big: "t-2"} {
		if len(got[id]) != 1 {
			t.Errorf("%s delivered %d times, want once", id, len(got[id]))
			continue
		}
		if d := got[id][0]; d.Headers["trace"] != trace || d.Exchange != w.exchange {
			t.Errorf("%s delivered with headers %v on %q", id, d.Headers, d.Exchange)
		}
	}
	if len(got[big]) == 1 && len(got[big][0].Body) != 5009 {
		t.Errorf("the large row delivered with %d bytes, want 5009", len(got[big][0].Body))
	}
	if out := w.parked(0, "discard", "--yes", junk); !strings.Contains(out, "discarded "+junk) {
		t.Fatalf("discard:\n%s", out)
	}
	if out := w.parked(0, "list"); !strings.Contains(out, "no parked messages") {
		t.Fatalf("list at the end:\n%s", out)
	}
	if code := r.Stop(time.Minute); code != 0 {
		t.Fatalf("walbox run exited %d:\n%s", code, r.Output())
	}
}

// parked runs walbox parked with args, expects the exit code, and returns the output. Arguments
// of the form NAME=VALUE are environment settings.
func (w *world) parked(code int, args ...string) string {
	w.t.Helper()
	var env, cmd []string
	for _, a := range args {
		if strings.HasPrefix(a, "WALBOX_") {
			env = append(env, a)
		} else {
			cmd = append(cmd, a)
		}
	}
	out, got := w.walbox(env, append([]string{"parked"}, cmd...)...)
	if got != code {
		w.t.Fatalf("walbox parked %v exited %d, want %d:\n%s", cmd, got, code, out)
	}
	return out
}

// parkedPoints are the kill points of walbox parked replay.
var parkedPoints = []string{"parked.confirmed", "parked.stored"}

// A replay killed once the broker confirmed the new message, before the parked copy was removed,
// leaves the copy parked: the next replay sends the row once more (at least once) and removes it.
// In stream mode, killed once the stream stored it, before the record: the next replay sends it
// again with its publishing id, and the stream holds it once.
func TestParkedReplayKilledAtEveryPoint(t *testing.T) {
	heavy(t)
	t.Run("park queue", func(t *testing.T) {
		w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
		w.startRelay().waitState("streaming", time.Minute)
		a := w.insertBadRow()
		w.waitParked(nil, a)
		w.fixRow(a)
		w.killedAt("parked.confirmed", 1, "parked", "replay", a)
		got := map[string]int{}
		waitFor(t, time.Minute, "the replayed row", func() bool { w.countDelivered(got); return got[a] > 0 })
		if ids := w.waitParked(nil, a); len(ids) != 1 {
			t.Fatalf("after the kill, list shows %v, want %s still parked", ids, a)
		}
		w.parked(0, "replay", a)
		waitFor(t, time.Minute, "the row sent again", func() bool { w.countDelivered(got); return got[a] > 1 })
		if out := w.parked(0, "list"); !strings.Contains(out, "no parked messages") {
			t.Fatalf("list after the second replay:\n%s", out)
		}
	})
	t.Run("park stream", func(t *testing.T) {
		rabbit := testenv.SharedRabbitStream(t)
		w := newWorld(t, testenv.SharedPostgres(t), rabbit)
		env, sr := newStream(t, rabbit)
		w.startRelay(env...).waitState("streaming", time.Minute)
		a := w.insertBadRow()
		w.waitParked(env, a)
		w.fixRow(a)
		w.killedWith(env, "parked.stored", 1, "parked", "replay", a)
		if ids := w.waitParked(env, a); len(ids) != 1 {
			t.Fatalf("after the kill, list shows %v, want %s", ids, a)
		}
		w.parked(0, append([]string{"replay", a}, env...)...)
		if out := w.parked(0, append([]string{"list"}, env...)...); !strings.Contains(out, "no parked messages") {
			t.Fatalf("list after the second replay:\n%s", out)
		}
		count := func() int {
			n := 0
			for _, m := range sr.messages() {
				if m.Properties != nil && fmt.Sprint(m.Properties.MessageID) == a {
					n++
				}
			}
			return n
		}
		waitFor(t, time.Minute, "the replayed row in the stream", func() bool { return count() > 0 })
		time.Sleep(time.Second) // the reader has had time to get both, were both stored
		if n := count(); n != 1 {
			t.Fatalf("%s is in the stream %d times, want once", a, n)
		}
	})
}
