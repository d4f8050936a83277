package faults_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/test/checker"
)

// The standby walbox decodes on (--replication-url) is promoted while walbox streams from it, and
// the old primary, where --database-url points and walbox keeps its record, goes on taking rows:
// two servers with one history up to the promotion. Rows the old primary commits after it never
// reach the promoted server's slot, so walbox must not confirm past them: it stops at once with
// one line, and no row is lost silently (each is either delivered or still ahead of the record).
func TestStandbyPromotedUnderReplicationURL(t *testing.T) {
	heavy(t)
	w, _, standby, replURL := standbyPair(t)
	env := "WALBOX_REPLICATION_URL=" + replURL
	v := w.startVerifier()
	r := w.startRelay(env)
	r.waitState("streaming", time.Minute)
	wr := w.startWriter(checker.WriterConfig{Seed: 23, MaxTx: 5, Pause: 10 * time.Millisecond})
	waitDelivered(t, v, 200, time.Minute)
	standby.Promote(t)
	// The fork: the last position the promoted server replayed from the primary.
	var fork pglogrepl.LSN
	if err := readLSN(replURL, "SELECT pg_last_wal_replay_lsn()::text", &fork); err != nil {
		t.Fatal(err)
	}
	// The old primary goes on; walbox must stop before it records anything past the fork.
	waitFor(t, 30*time.Second, "walbox to stop", func() bool {
		var lost int
		if !r.Exited() {
			lost = checker.Check(wr.Committed(), v.Deliveries()).Lost
		}
		return r.Exited() || lost > 500
	})
	wr.stop()
	var record pglogrepl.LSN
	if err := readLSN(w.db, "SELECT confirmed_lsn::text FROM public.walbox_slots WHERE slot_name = $1", &record, w.slot); err != nil {
		t.Fatal(err)
	}
	t.Logf("fork at %s, record at %s", fork, record)
	if !r.Exited() {
		t.Fatalf("walbox went on streaming from the promoted standby, though rows the old primary commits never reach it:\n%s", r.Output())
	}
	if code := r.ExitCode(); code == 0 || !strings.Contains(r.Output(), "no longer a standby") {
		t.Errorf("walbox exited %d without saying the standby was promoted:\n%s", code, r.Output())
	}
	if record > fork {
		t.Errorf("the record is at %s, past the fork at %s: rows the old primary committed in between would be skipped", record, fork)
	}
	// The way out the line names: --database-url at the promoted server, which walbox then
	// decodes on as a primary. Rows it commits from now on are delivered.
	r = w.startRelay("WALBOX_DATABASE_URL="+replURL, env)
	r.waitState("streaming", time.Minute)
	cw := w.newWriter(checker.WriterConfig{DatabaseURL: replURL, Seed: 24, Name: "promoted"})
	from := v.Count()
	if err := cw.Tx(t.Context(), 20); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, v, from+20, time.Minute)
}

// A standby rebuilt while walbox is stopped gets a new slot of the same name. The standby has the
// primary's system identifier, so only the position tells the new slot from the old: it is ahead
// of the record on the primary, and walbox refuses it at once, naming walbox recover.
func TestReplacedStandbySlotRefused(t *testing.T) {
	heavy(t)
	w, primary, _, replURL := standbyPair(t)
	env := "WALBOX_REPLICATION_URL=" + replURL
	v := w.startVerifier()
	r := w.startRelay(env)
	r.waitState("streaming", time.Minute)
	cw := w.newWriter(checker.WriterConfig{Seed: 9})
	if err := cw.Tx(t.Context(), 50); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, v, 50, time.Minute)
	r.Stop(30 * time.Second)
	waitFor(t, 30*time.Second, "the standby's slot dropped", func() bool {
		var ok bool
		return execRow(t, replURL, "SELECT true FROM pg_drop_replication_slot($1)", &ok, w.slot) == nil
	})
	if err := cw.Tx(t.Context(), 50); err != nil {
		t.Fatal(err)
	}
	// A new slot of the same name on the standby, with the primary's help.
	created := make(chan error, 1)
	go func() {
		var name string
		created <- execRow(t, replURL, "SELECT slot_name::text FROM pg_create_logical_replication_slot($1, 'pgoutput')", &name, w.slot)
	}()
	var err error
	waitFor(t, time.Minute, "the new slot on the standby", func() bool {
		primary.Exec(t, w.db, "SELECT pg_log_standby_snapshot()")
		select {
		case err = <-created:
			return true
		case <-time.After(200 * time.Millisecond):
			return false
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	r = w.startRelay(env)
	waitFor(t, time.Minute, "walbox to stop", r.Exited)
	if out := r.Output(); r.ExitCode() == 0 || !strings.Contains(out, "ahead of") || !strings.Contains(out, "walbox recover") {
		t.Errorf("walbox took a replaced standby slot (exit %d):\n%s", r.ExitCode(), out)
	}
}

// The standby walbox decodes on stops receiving the primary's WAL (its primary_conninfo broken)
// while walbox goes on confirming what it decoded, and is then promoted: the documented way out
// of a failed primary, --database-url at the promoted server. walbox reports a position to the
// standby only once the standby replayed the record of it, so the record there is not behind the
// slot and walbox goes on, without a "slot ahead of record" stop.
func TestPromotedStandbyRecordNotBehindSlot(t *testing.T) {
	heavy(t)
	w, _, standby, replURL := standbyPair(t)
	env := "WALBOX_REPLICATION_URL=" + replURL
	v := w.startVerifier()
	r := w.startRelay(env)
	r.waitState("streaming", time.Minute)
	wr := w.startWriter(checker.WriterConfig{Seed: 31, MaxTx: 5, Pause: 5 * time.Millisecond})
	waitDelivered(t, v, 200, time.Minute)
	standby.Exec(t, standby.URL(), "ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=1'")
	standby.Exec(t, standby.URL(), "SELECT pg_reload_conf()")
	time.Sleep(3 * time.Second) // walbox confirms what the standby has; the records of it stay on the primary
	wr.stop()
	if code := r.Stop(30 * time.Second); code != 0 {
		t.Fatalf("walbox run exited %d:\n%s", code, r.Output())
	}
	standby.Promote(t)
	var slot, record pglogrepl.LSN
	if err := readLSN(replURL, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", &slot, w.slot); err != nil {
		t.Fatal(err)
	}
	if err := readLSN(replURL, "SELECT confirmed_lsn::text FROM public.walbox_slots WHERE slot_name = $1", &record, w.slot); err != nil {
		t.Fatal(err)
	}
	t.Logf("on the promoted standby: slot at %s, record at %s", slot, record)
	if slot > record {
		t.Errorf("the promoted standby's slot is at %s, ahead of its record at %s: walbox would refuse it", slot, record)
	}
	r = w.startRelay("WALBOX_DATABASE_URL="+replURL, env)
	r.waitState("streaming", time.Minute)
}
