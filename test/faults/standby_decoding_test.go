package faults_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/test/checker"
)

// standbyPair starts a PostgreSQL 17 primary and a hot standby of it with hot_standby_feedback
// on and a physical slot on the primary, and a world on the primary whose slot walbox migrate
// created on the standby (--replication-url). The world's relays stream from the standby.
func standbyPair(t *testing.T) (w *world, primary, standby *testenv.Postgres, replURL string) {
	t.Helper()
	primary = testenv.StartPostgres(t, testenv.PGVersion(17))
	testenv.RequireOwn(t, primary)
	standby = testenv.StartStandby(t, primary, "standby1", testenv.WithSetting("hot_standby_feedback", "on"))
	w = newWorld(t, primary, testenv.SharedRabbit(t))
	replURL = withHost(t, w.db, hostOf(t, standby.URL()))
	waitFor(t, time.Minute, "the database on the standby", func() bool {
		var n int
		return execRow(t, replURL, "SELECT count(*) FROM public.outbox", &n) == nil
	})
	// A slot of the standby's own, created by migrate with the primary's help.
	w.slot = testenv.UniqueName("slot")
	start := time.Now()
	out, code := w.walbox([]string{"WALBOX_REPLICATION_URL=" + replURL}, "migrate")
	if code != 0 || !strings.Contains(out, "created replication slot "+w.slot) {
		t.Fatalf("walbox migrate --replication-url exited %d:\n%s", code, out)
	}
	t.Logf("walbox migrate created slot %s on the standby in %v", w.slot, time.Since(start).Round(time.Millisecond))
	var onStandby bool
	if err := execRow(t, replURL, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", &onStandby, w.slot); err != nil || !onStandby {
		t.Fatalf("slot %s is not on the standby (%v)", w.slot, err)
	}
	return w, primary, standby, replURL
}

// walbox streams from a hot standby's slot (--replication-url) while the writer loads the primary,
// where walbox keeps its record; it is SIGKILLed at random moments and started again. Nothing is
// lost, nothing delivered that was not committed, and the slot on the standby is never ahead of
// the record on the primary.
func TestRelayOnAStandbyKilledAndRestarted(t *testing.T) {
	heavy(t)
	w, _, _, replURL := standbyPair(t)
	standbyEnv := "WALBOX_REPLICATION_URL=" + replURL
	v := w.startVerifier()
	seed := uint64(time.Now().UnixNano())
	wr := w.startWriter(checker.WriterConfig{Seed: seed, MaxTx: 20, Pause: 5 * time.Millisecond})
	const rounds = 6
	for i := range rounds {
		r := w.startRelay(standbyEnv)
		time.Sleep(time.Duration(500+int(seed>>uint(i))%1500) * time.Millisecond)
		r.Kill()
		checkSlotNotAheadOfRecord(t, w, replURL)
	}
	wr.stop()
	r := w.startRelay(standbyEnv)
	w.verdict(wr.Writer, v, 3*time.Minute, rounds, rounds, "")
	checkSlotNotAheadOfRecord(t, w, replURL)
	if out := r.Output(); !strings.Contains(out, "msg=streaming") {
		t.Errorf("walbox never streamed from the standby:\n%s", out)
	}
}

// checkSlotNotAheadOfRecord fails the test if the standby's slot is ahead of walbox's record on
// the primary.
func checkSlotNotAheadOfRecord(t *testing.T, w *world, replURL string) {
	t.Helper()
	var slot, record string
	if err := execRow(t, replURL, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", &slot, w.slot); err != nil {
		t.Fatal(err)
	}
	if err := execRow(t, w.db, "SELECT confirmed_lsn::text FROM public.walbox_slots WHERE slot_name = $1", &record, w.slot); err != nil {
		t.Fatal(err)
	}
	var ahead bool
	if err := execRow(t, w.db, "SELECT $1::pg_lsn > $2::pg_lsn", &ahead, slot, record); err != nil {
		t.Fatal(err)
	}
	if ahead {
		t.Errorf("the standby's slot is at %s, ahead of the record on the primary (%s)", slot, record)
	}
}

// The primary's CPU per message, with walbox decoding on the primary and on a standby: the same
// rows, written by one connection, relayed to the broker. The CPU of the primary's processes from
// /proc/<pid>/stat (utime + stime), over the rows: all of them (the postmaster and its children:
// the backend writing, walbox's record connection, the walsenders, the auxiliaries), and the
// walsenders alone. docs/ha.md quotes the figures. `make test` relays 20,000 rows each way, the
// soak 50,000. At 20,000 the walsenders' cost still differed fourfold (120 and 30 ms).
func TestStandbyDecodingSparesThePrimary(t *testing.T) {
	heavy(t)
	rows := soakInt("WALBOX_SOAK_STANDBY_ROWS", 20000, 50000)
	w, primary, _, replURL := standbyPair(t)
	v := w.startVerifier()
	cw := w.newWriter(checker.WriterConfig{Seed: 5})
	measure := func(where string, env ...string) (all, senders float64) {
		r := w.startRelay(env...)
		r.waitState("streaming", time.Minute)
		from := v.Count()
		before := postmasterCPU(t, primary.PID())
		start := time.Now()
		for range rows / 100 {
			if err := cw.Tx(t.Context(), 100); err != nil {
				t.Fatal(err)
			}
		}
		waitDelivered(t, v, from+rows, 3*time.Minute)
		used := postmasterCPU(t, primary.PID()).minus(before)
		r.Stop(30 * time.Second)
		all, senders = used.all.Seconds()*1e6/float64(rows), used.senders.Seconds()*1e6/float64(rows)
		t.Logf("FIGURE primary CPU per message, decoding on the %s: %.1f µs in all, %.1f µs in walsenders "+
			"(%v and %v over %d rows in %v)", where, all, senders, used.all, used.senders, rows, time.Since(start).Round(time.Millisecond))
		return all, senders
	}
	// The primary's own slot for the first run; the standby's (the world's) for the second.
	onStandby := w.slot
	w.slot = testenv.UniqueName("slot")
	if out, code := w.walbox(nil, "migrate"); code != 0 {
		t.Fatalf("walbox migrate exited %d:\n%s", code, out)
	}
	primaryAll, primarySenders := measure("primary")
	w.pg.Exec(t, w.db, "SELECT pg_drop_replication_slot($1)", w.slot)
	w.slot = onStandby
	standbyAll, standbySenders := measure("standby", "WALBOX_REPLICATION_URL="+replURL)
	t.Logf("SUMMARY %s rows=%d primary_cpu_per_message_us all: on_primary=%.1f on_standby=%.1f; walsenders: on_primary=%.1f on_standby=%.1f",
		t.Name(), rows, primaryAll, standbyAll, primarySenders, standbySenders)
	if standbySenders >= primarySenders {
		t.Errorf("decoding on the standby cost the primary's walsenders %.1f µs per message, not less than decoding on the primary (%.1f)",
			standbySenders, primarySenders)
	}
}

// cpu is CPU time used by the primary's processes.
type cpu struct{ all, senders time.Duration }

func (c cpu) minus(o cpu) cpu { return cpu{c.all - o.all, c.senders - o.senders} }

// postmasterCPU returns the user and system CPU the postmaster pid and its children used so far,
// and how much of it the walsenders did.
func postmasterCPU(t *testing.T, pid int) cpu {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var all, senders int64
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// The command is in parentheses and may hold spaces: the fields follow the last ')'.
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		ppid, _ := strconv.Atoi(f[1])
		if n != pid && ppid != pid {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		all += utime + stime
		if title, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(title), "walsender") {
			senders += utime + stime
		}
	}
	const hz = 100 // USER_HZ on Linux
	return cpu{time.Duration(all) * time.Second / hz, time.Duration(senders) * time.Second / hz}
}

// The standby's slot is lost while walbox is down and the writer goes on: walbox recover
// --replication-url makes the new slot on the standby, republishes the gap from the standby's
// rows in that slot's snapshot, resets the record on the primary, and walbox goes on from the
// standby. Nothing is lost.
func TestRecoverStandbySlot(t *testing.T) {
	heavy(t)
	w, _, _, replURL := standbyPair(t)
	env := "WALBOX_REPLICATION_URL=" + replURL
	v := w.startVerifier()
	r := w.startRelay(env)
	r.waitState("streaming", time.Minute)
	wr := w.startWriter(checker.WriterConfig{Seed: 54, MaxTx: 10, Pause: 10 * time.Millisecond})
	waitDelivered(t, v, 200, time.Minute)
	r.Kill()
	waitFor(t, 30*time.Second, "the standby's slot dropped", func() bool {
		var ok bool
		return execRow(t, replURL, "SELECT true FROM pg_drop_replication_slot($1)", &ok, w.slot) == nil
	})
	time.Sleep(500 * time.Millisecond) // the gap grows
	if gap := checker.Check(wr.Committed(), v.Deliveries()).Lost; gap == 0 {
		t.Fatal("no committed row is missing from the queue: there is no gap and the test proves nothing")
	}
	out, code := w.walbox([]string{env}, "recover")
	if code != 0 || !strings.Contains(out, "republished") {
		t.Fatalf("walbox recover --replication-url exited %d:\n%s", code, out)
	}
	t.Logf("walbox recover --replication-url:\n%s", out)
	var onStandby, onPrimary bool
	if err := execRow(t, replURL, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", &onStandby, w.slot); err != nil {
		t.Fatal(err)
	}
	if err := execRow(t, w.db, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", &onPrimary, w.slot); err != nil {
		t.Fatal(err)
	}
	if !onStandby || onPrimary {
		t.Errorf("after recover the slot is on the standby: %t, on the primary: %t; want the standby only", onStandby, onPrimary)
	}
	r = w.startRelay(env)
	r.waitState("streaming", time.Minute)
	w.progress(v, 200, time.Minute)
	wr.stop()
	if rep := w.verdict(wr.Writer, v, 2*time.Minute, 1, 1, ""); rep.Lost != 0 {
		t.Errorf("lost %d rows over the whole run", rep.Lost)
	}
	checkSlotNotAheadOfRecord(t, w, replURL)
}

// walbox reshard --replication-url creates the new set's slots on the standby, where the relays
// decode, reads the old and new slots there, and --retire drops the old one there once its record
// passed the cut. The old code ignored --replication-url: it created the new slots on the primary
// and judged the standby's old slot missing.
func TestReshardOnAStandby(t *testing.T) {
	heavy(t)
	w, _, _, replURL := standbyPair(t)
	standbyEnv := "WALBOX_REPLICATION_URL=" + replURL
	onStandby := func(slot string) (standby, primary bool) {
		t.Helper()
		const q = "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)"
		if err := execRow(t, replURL, q, &standby, slot); err != nil {
			t.Fatal(err)
		}
		if err := execRow(t, w.db, q, &primary, slot); err != nil {
			t.Fatal(err)
		}
		return standby, primary
	}
	out, code := w.walbox([]string{standbyEnv}, "reshard", "--shards", "2")
	if code != 0 || !strings.Contains(out, "cut") {
		t.Fatalf("walbox reshard --shards 2 --replication-url exited %d:\n%s", code, out)
	}
	set := shard.Set{Slot: w.slot, Publication: "walbox", N: 2}
	for k := range 2 {
		if standby, primary := onStandby(set.SlotName(k)); !standby || primary {
			t.Fatalf("slot %s: on the standby %t, on the primary %t; want the standby only:\n%s", set.SlotName(k), standby, primary, out)
		}
	}
	// walbox status reads the shards' slots where they are too.
	if out, _ := w.walbox([]string{standbyEnv}, "status"); strings.Contains(out, "(missing)") || strings.Contains(out, "does not exist") ||
		!strings.Contains(out, set.SlotName(1)) {
		t.Errorf("walbox status --replication-url does not show the standby's shard slots:\n%s", out)
	}
	// So does walbox doctor, each with its record.
	if out, _ := w.walbox([]string{standbyEnv}, "doctor"); strings.Contains(out, set.SlotName(1)+" does not exist") ||
		!strings.Contains(out, "slot "+set.SlotName(1)+" matches walbox's record") {
		t.Errorf("walbox doctor --replication-url does not check the standby's shard slots against their records:\n%s", out)
	}
	// The old relay has not confirmed the cut yet: retire refuses, reading the standby's slot.
	out, code = w.walbox([]string{standbyEnv}, "reshard", "--shards", "2", "--retire")
	if code == 0 || !strings.Contains(out, "before the cut") || strings.Contains(out, "missing") {
		t.Fatalf("walbox reshard --retire before the cut exited %d; want non-zero, the old slot before the cut:\n%s", code, out)
	}
	r := w.startRelay(standbyEnv)
	r.waitState("streaming", time.Minute)
	waitFor(t, 2*time.Minute, "the old relay to pass the cut", func() bool {
		w.exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'order.created', '{}')`)
		out, code := w.walbox([]string{standbyEnv}, "reshard", "--shards", "2")
		return code == 0 && strings.Contains(out, "passed the cut")
	})
	if code := r.Stop(time.Minute); code != 0 {
		t.Fatalf("walbox run exited %d:\n%s", code, testenv.Tail(r.Output(), 20))
	}
	out, code = w.walbox([]string{standbyEnv}, "reshard", "--shards", "2", "--retire")
	if code != 0 || !strings.Contains(out, "dropped replication slot "+w.slot) {
		t.Fatalf("walbox reshard --retire exited %d; want the old slot dropped:\n%s", code, out)
	}
	if standby, _ := onStandby(w.slot); standby {
		t.Fatalf("the old slot %s is still on the standby:\n%s", w.slot, out)
	}
}
