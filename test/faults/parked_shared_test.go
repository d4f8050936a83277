package faults_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// Two databases relay to one exchange, so they park into one park queue. walbox parked with one's
// settings lists, replays and discards its own rows only. The other's id gets one line naming
// the other database (exit 2), and --all leaves the other's rows parked. Rows walbox replay
// parks name their database as well.
func TestParkedOfTwoDatabasesOnOneExchange(t *testing.T) {
	heavy(t)
	pg, rabbit := testenv.SharedPostgres(t), testenv.SharedRabbit(t)
	one, two := newWorld(t, pg, rabbit), newWorld(t, pg, rabbit)
	two.exchange = one.exchange
	for _, w := range []*world{one, two} {
		w.startRelay().waitState("streaming", time.Minute)
	}
	a, b := one.insertBadRow(), two.insertBadRow()
	one.waitParked(nil, a)
	two.waitParked(nil, b)
	if got := parkedIDs(one.parked(0, "list")); !slices.Equal(got, []string{a}) {
		t.Fatalf("the first database's list shows %v, want only %s", got, a)
	}
	if got := parkedIDs(two.parked(0, "list")); !slices.Equal(got, []string{b}) {
		t.Fatalf("the second database's list shows %v, want only %s", got, b)
	}
	for _, args := range [][]string{{"discard", "--yes", b}, {"replay", b}, {"show", b}} {
		out := one.parked(2, args...)
		if !strings.Contains(out, "another database") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
			t.Errorf("%v of the other database's id: want one line naming another database, got:\n%s", args, out)
		}
	}
	one.fixRow(a)
	if out := one.parked(0, "replay", "--all"); !strings.Contains(out, "replayed "+a) || strings.Contains(out, b) {
		t.Fatalf("replay --all of the first database:\n%s", out)
	}
	one.waitParked(nil, one.insertBadRow())
	if out := one.parked(0, "discard", "--yes", "--all"); strings.Contains(out, b) {
		t.Fatalf("discard --all of the first database touched the second's row:\n%s", out)
	}
	if got := parkedIDs(two.parked(0, "list")); !slices.Equal(got, []string{b}) {
		t.Fatalf("after the first database's commands, the second lists %v, want %s", got, b)
	}
	// walbox replay parks the bad row again: that copy names its database too.
	if out, code := two.walbox(nil, "replay", "--rate=0"); code != 0 {
		t.Fatalf("walbox replay exited %d:\n%s", code, out)
	}
	if got := parkedIDs(two.parked(0, "list")); !slices.Equal(got, []string{b, b}) {
		t.Fatalf("after walbox replay, the second database lists %v, want %s twice", got, b)
	}
	if got := parkedIDs(one.parked(0, "list")); len(got) != 0 {
		t.Fatalf("after the second database's walbox replay, the first lists %v", got)
	}
	two.fixRow(b)
	if out := two.parked(0, "replay", b); !strings.Contains(out, "replayed "+b+" from the table row (2 parked copies)") {
		t.Fatalf("the second database's replay:\n%s", out)
	}
}

// Two databases relay into one stream, so they park into one park stream. Each lists its own
// entries only. A replay of one database cut short before its send (recorded as replaying) is
// sent again with its publishing id. Another database's replays meanwhile must not take that id:
// the broker would drop the first as a duplicate.
func TestParkedStreamOfTwoDatabases(t *testing.T) {
	heavy(t)
	rabbit := testenv.SharedRabbitStream(t)
	pg := testenv.SharedPostgres(t)
	one, two := newWorld(t, pg, rabbit), newWorld(t, pg, rabbit)
	env, sr := newStream(t, rabbit)
	for _, w := range []*world{one, two} {
		w.startRelay(env...).waitState("streaming", time.Minute)
	}
	a := one.insertBadRow()
	one.waitParked(env, a)
	b := two.insertBadRow()
	two.waitParked(env, b)
	if got := parkedIDs(one.parked(0, append([]string{"list"}, env...)...)); !slices.Equal(got, []string{a}) {
		t.Errorf("the first database's list shows %v, want only %s", got, a)
	}
	if got := parkedIDs(two.parked(0, append([]string{"list"}, env...)...)); !slices.Equal(got, []string{b}) {
		t.Errorf("the second database's list shows %v, want only %s", got, b)
	}
	// A replay of b recorded with publishing id 1, then killed before its send.
	stream := strings.TrimPrefix(env[1], "WALBOX_STREAM=")
	two.exec(`INSERT INTO walbox_parked_handled (park_stream, park_offset, message_id, action, publishing_id)
		VALUES ($1, 1, $2, 'replaying', 1)`, stream+".parked", b)
	one.fixRow(a)
	if out := one.parked(0, append([]string{"replay", a}, env...)...); !strings.Contains(out, "replayed "+a) {
		t.Fatalf("the first database's replay:\n%s", out)
	}
	two.fixRow(b)
	if out := two.parked(0, append([]string{"replay", b}, env...)...); !strings.Contains(out, "replayed "+b) {
		t.Fatalf("the second database's replay:\n%s", out)
	}
	waitFor(t, time.Minute, "both replays in the stream", func() bool { return sr.countID(a) == 1 && sr.countID(b) == 1 })
}

// countID returns how often the stream holds a message with id.
func (sr *streamReader) countID(id string) int {
	n := 0
	for _, m := range sr.messages() {
		if m.Properties != nil && fmt.Sprint(m.Properties.MessageID) == id {
			n++
		}
	}
	return n
}
