package faults_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/walbox/walbox/internal/testenv"
)

// walbox parked on the park stream, beside a running relay. A row with a reserved header is
// parked, listed, replayed unfixed (parked again), fixed and replayed into the stream once. A
// replay whose record a kill cut short is sent again and stored once. A discard hides an entry.
// The relay, restarted, continues past the replays in its stream.
func TestParkedStreamListedReplayedDiscarded(t *testing.T) {
	heavy(t)
	rabbit := testenv.SharedRabbitStream(t)
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	env, sr := newStream(t, rabbit)
	r := w.startRelay(env...)
	r.waitState("streaming", time.Minute)
	good := func() string {
		id := uuid.NewString()
		w.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'o', '1', 'o.ok', '{}')`, id)
		return id
	}
	first := good()
	a, b, c := w.insertBadRow(), w.insertBadRow(), w.insertBadRow()
	sr.wait(t, 1, time.Minute)
	w.waitParked(env, a, b, c)
	inStream := func(id string) int { return sr.countID(id) }

	out := w.parked(0, append([]string{"replay", a}, env...)...)
	if !strings.Contains(out, "parked "+a+" again") || !strings.Contains(out, "x-walbox-mine") {
		t.Fatalf("replay of the unfixed row:\n%s", out)
	}
	if got := w.waitParked(env, a, b, c); len(got) != 3 {
		t.Fatalf("after parking again, list shows %v, want %s, %s and %s once each", got, a, b, c)
	}
	w.fixRow(a)
	w.fixRow(c)
	if out := w.parked(0, append([]string{"replay", a, c}, env...)...); strings.Count(out, "from the table row") != 2 {
		t.Fatalf("replay after the fix:\n%s", out)
	}
	waitFor(t, time.Minute, "the replayed rows in the stream", func() bool { return inStream(a) > 0 && inStream(c) > 0 })
	w.parked(2, append([]string{"replay", a}, env...)...)

	// A kill after the broker stored c's replay, before walbox recorded it.
	w.exec(`UPDATE walbox_parked_handled SET action = 'replaying' WHERE message_id = $1`, c)
	if got := w.waitParked(env, b, c); !slices.Equal(got, []string{b, c}) {
		t.Fatalf("with c's replay cut short, list shows %v, want %s and %s", got, b, c)
	}
	if out := w.parked(0, append([]string{"replay", c}, env...)...); !strings.Contains(out, "replayed "+c) {
		t.Fatalf("replay of the cut-short one:\n%s", out)
	}
	if out := w.parked(0, append([]string{"discard", "--yes", b}, env...)...); !strings.Contains(out, "discarded "+b) {
		t.Fatalf("discard:\n%s", out)
	}
	if out := w.parked(0, append([]string{"list"}, env...)...); !strings.Contains(out, "no parked messages") {
		t.Fatalf("list at the end:\n%s", out)
	}

	// The relay goes on past the replays, and again after a restart.
	next := good()
	if code := r.Stop(time.Minute); code != 0 {
		t.Fatalf("walbox run exited %d:\n%s", code, r.Output())
	}
	r = w.startRelay(env...)
	last := good()
	waitFor(t, time.Minute, "the rows after the replays", func() bool { return inStream(last) > 0 })
	for _, id := range []string{first, a, c, next, last} {
		if n := inStream(id); n != 1 {
			t.Errorf("%s is in the stream %d times, want once", id, n)
		}
	}
	if n := inStream(b); n != 0 {
		t.Errorf("the discarded %s is in the stream %d times", b, n)
	}
	// A database migrated before walbox parked had a record says how to make it.
	w.exec("DROP TABLE walbox_parked_handled")
	if out := w.parked(1, append([]string{"list"}, env...)...); !strings.Contains(out, "run walbox migrate first") {
		t.Errorf("list without the record:\n%s", out)
	}
	if code := r.Stop(time.Minute); code != 0 {
		t.Fatalf("walbox run exited %d:\n%s", code, r.Output())
	}
}

// A stream cannot hold a row back, so the relay parks a row due later. A replay before it is due
// leaves it parked and says when; once due, a replay stores it.
func TestParkedStreamRowDueLaterWaitsForItsTime(t *testing.T) {
	heavy(t)
	rabbit := testenv.SharedRabbitStream(t)
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	env, sr := newStream(t, rabbit)
	w.startRelay(env...).waitState("streaming", time.Minute)
	id := uuid.NewString()
	w.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, deliver_at)
		VALUES ($1, 'o', '1', 'o.later', '{}', pg_catalog.now() + interval '1 hour')`, id)
	w.waitParked(env, id)
	if out := w.parked(0, append([]string{"replay", id}, env...)...); !strings.Contains(out, "left "+id+" parked: due at ") {
		t.Fatalf("replay before it is due:\n%s", out)
	}
	w.waitParked(env, id)
	w.exec(`UPDATE outbox SET deliver_at = pg_catalog.now() - interval '1 second' WHERE id = $1`, id)
	if out := w.parked(0, append([]string{"replay", id}, env...)...); !strings.Contains(out, "replayed "+id) {
		t.Fatalf("replay once due:\n%s", out)
	}
	waitFor(t, time.Minute, "the row in the stream", func() bool {
		for _, m := range sr.messages() {
			if m.Properties != nil && fmt.Sprint(m.Properties.MessageID) == id {
				return true
			}
		}
		return false
	})
}
