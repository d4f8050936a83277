package faults_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/test/checker"
)

// Publishing into a stream, a PostgreSQL 17 primary fails over to its standby, a new timeline.
// walbox goes on from the synchronised slot, whose position lags what the stream has: the rows it
// replays are of the old timeline, at or before the anchor, and are not stored again. It is then
// SIGKILLed on the new timeline and started again. The stream holds each row of the new primary's
// table exactly once, and nothing else.
func TestStreamExactlyOnceAcrossATimelineSwitch(t *testing.T) {
	heavy(t)
	primary, standby := testenv.StartFailoverPair(t,
		testenv.WithSetting("sync_replication_slots", "on"), testenv.WithSetting("hot_standby_feedback", "on"))
	rabbit := testenv.SharedRabbitStream(t)

	w := newWorld(t, primary, rabbit)
	both := bothHosts(t, w.db, standby.Port())
	w.relayDB = both
	standbyDB := withHost(t, w.db, hostOf(t, standby.URL()))
	name := testenv.UniqueName("events")
	env := []string{"WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name}
	sr := readStream(t, rabbit.StreamURL(), name)

	wr := w.startWriter(checker.WriterConfig{DatabaseURL: both, MaxTx: 5, Pause: 5 * time.Millisecond, Seed: uint64(time.Now().UnixNano())})
	r := w.startRelay(env...)
	sr.progress(t, 300, 2*time.Minute)
	waitFor(t, time.Minute, "the standby to synchronise the slot", func() bool {
		var ok bool
		err := execRow(t, standbyDB, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND synced AND NOT temporary)", &ok, w.slot)
		return err == nil && ok
	})
	sr.progress(t, 300, time.Minute)

	primary.Stop(t, "immediate")
	standby.Promote(t)
	t.Logf("promoted with %d messages in the stream", sr.count())
	sr.progress(t, 300, 2*time.Minute)
	r.Kill()
	anchors := anchorLines(r.Output())
	r = w.startRelay(env...)
	sr.progress(t, 300, 2*time.Minute)
	wr.stop()

	rows := tableIDs(t, standbyDB)
	waitFor(t, 3*time.Minute, fmt.Sprintf("%d rows in the stream", len(rows)), func() bool { return sr.count() >= len(rows) })
	time.Sleep(3 * time.Second) // anything stored twice would be there by now
	seen := map[string]int{}
	extra := 0
	systems := map[string]bool{}
	for _, m := range sr.messages() {
		system, _ := m.ApplicationProperties[streampub.PropSystem].(string)
		systems[system] = true
		id := fmt.Sprint(m.Properties.MessageID)
		seen[id]++
		if !rows[id] {
			extra++
		}
	}
	dups, lost := 0, 0
	for id, n := range seen {
		dups += n - 1
		if n > 1 && dups <= 3 {
			t.Logf("stored %d times: %s", n, id)
		}
	}
	for id := range rows {
		if seen[id] == 0 {
			lost++
		}
	}
	anchors = append(anchors, anchorLines(r.Output())...)
	t.Logf("anchors at session starts:\n%s", strings.Join(anchors, "\n"))
	if !slices.ContainsFunc(anchors, func(a string) bool { return strings.HasPrefix(a, "2/") }) {
		t.Errorf("no session started from an anchor on the new timeline: the test proved little")
	}
	t.Logf("SUMMARY %s rows=%d stored=%d lost=%d duplicates=%d not_in_table=%d", t.Name(), len(rows), sr.count(), lost, dups, extra)
	if lost != 0 || dups != 0 || extra != 0 {
		t.Errorf("%d lost, %d stored twice, %d not in the new primary's table: want none\n%s", lost, dups, extra, r.Output())
	}
	if len(systems) != 1 || systems[""] {
		t.Errorf("the messages' %s: %v; want the one system of the primary and its standby", streampub.PropSystem, systems)
	}
	if len(rows) == 0 {
		t.Error("the new primary has no rows: the test proved nothing")
	}
}

// anchorLines returns the anchor positions that a relay's sessions started from, as it logged them.
func anchorLines(out string) []string {
	var pos []string
	for _, m := range regexp.MustCompile(`last_position=(\S+) last_found=true`).FindAllStringSubmatch(out, -1) {
		pos = append(pos, m[1])
	}
	return pos
}
