package faults_test

import (
	"context"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/testenv"
)

// The schedule's bench (issue 38): many messages scheduled over a span, with walbox killed, the
// standby taking over and PostgreSQL restarted while they wait. It runs only when soaking
// (WALBOX_SOAK=1, make soak); WALBOX_SCHEDULE_ROWS and WALBOX_SCHEDULE_SPAN size it. It logs one
// table row of figures for docs/bench/schedule.md: none early, none lost, lateness, retained WAL.
func TestScheduleBench(t *testing.T) {
	heavy(t)
	if !soaking() {
		t.Skip("bench: runs with WALBOX_SOAK=1 (make soak)")
	}
	rows := soakInt("WALBOX_SCHEDULE_ROWS", 100000, 100000)
	span := 10 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("WALBOX_SCHEDULE_SPAN")); err == nil && d > 0 {
		span = d
	}
	pg := testenv.StartPostgres(t) // of its own: it restarts; wal_sender_timeout at its default, so a loaded machine stops no relay
	testenv.RequireOwn(t, pg)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	arrivals := w.consumeArrivals()
	active := w.startRelay()
	active.waitState("streaming", time.Minute)
	standby := w.startRelay()
	standby.waitState("standby", time.Minute)

	start := time.Now()
	msgs := w.writeSpread(rows, span, scheduleLead)
	t.Logf("wrote %d messages due over %s in %s", len(msgs), span, time.Since(start).Round(time.Millisecond))

	// Faults at a fifth, two fifths, three fifths and four fifths of the span. The retained WAL is
	// sampled meanwhile; the first samples hold the write of every message, not yet recorded.
	var retained, settled []int64
	var struck []time.Time // when each fault struck
	faults := []string{"kill", "restart", "kill", "kill"}
	for i, f := range faults {
		until := start.Add(span * time.Duration(i+1) / 5)
		for time.Now().Before(until) {
			n := w.retainedWAL()
			retained = append(retained, n)
			if time.Since(start) > 30*time.Second {
				settled = append(settled, n)
			}
			time.Sleep(5 * time.Second)
		}
		t.Logf("retained WAL before the %s: %.1f MB, %d messages waiting", f, float64(retained[len(retained)-1])/1e6, w.waiting())
		struck = append(struck, time.Now())
		switch f {
		case "kill": // the active relay dies; the standby takes over; a new standby starts
			active.Kill()
			standby.waitState("streaming", 2*time.Minute)
			active, standby = standby, w.startRelay()
		case "restart":
			pg.Stop(t, "immediate")
			pg.Start(t)
			w.conn = pg.Conn(t, w.db)
		}
		t.Logf("%s at %s", f, time.Since(start).Round(time.Second))
	}
	waitFor(t, span+5*time.Minute, "every message delivered", func() bool {
		retained = append(retained, w.retainedWAL())
		return len(arrivals()) >= len(msgs)
	})
	time.Sleep(2 * time.Second)
	got := arrivals()
	var late, calm []time.Duration // calm: due more than 45 s after any fault, or before it
	worst := make([]time.Duration, len(struck))
	overSecond := make([]int, len(struck)) // messages over a second late, by fault
	calmOver := map[time.Duration]int{}    // calm messages over a second late, by 10 s of their due time
	lost, early, dups := 0, 0, 0
	for _, m := range msgs {
		a, ok := got[m.id]
		switch {
		case !ok:
			lost++
			continue
		case a.first.Before(m.deliverAt):
			early++
		}
		dups += a.count - 1
		l := a.first.Sub(m.deliverAt)
		late = append(late, l)
		near := false
		for i, f := range struck {
			if !m.deliverAt.Before(f) && m.deliverAt.Before(f.Add(45*time.Second)) {
				near, worst[i] = true, max(worst[i], l)
				if l > time.Second {
					overSecond[i]++
				}
			}
		}
		if !near {
			calm = append(calm, l)
			if l > time.Second {
				calmOver[m.deliverAt.Sub(start).Truncate(10*time.Second)]++
			}
		}
	}
	slices.Sort(calm)
	for i, f := range faults {
		t.Logf("due within 45 s after the %s at %s: the latest %s late, %d over a second", f, struck[i].Sub(start).Round(time.Second),
			worst[i].Round(time.Millisecond), overSecond[i])
	}
	t.Logf("calm messages over a second late, by 10 s of their due time after the start: %v", calmOver)
	if len(calm) > 0 {
		t.Logf("due away from every fault: %d messages, lateness p50 %s, p99 %s, max %s", len(calm),
			calm[len(calm)/2].Round(time.Millisecond), calm[int(0.99*float64(len(calm)-1))].Round(time.Millisecond),
			calm[len(calm)-1].Round(time.Millisecond))
	}
	slices.Sort(late)
	slices.Sort(retained)
	slices.Sort(settled)
	pct := func(p float64) time.Duration { return late[int(p*float64(len(late)-1))].Round(time.Millisecond) }
	t.Logf("| rows | span | faults | lost | early | duplicates | lateness p50 | p99 | max | retained WAL max | after 30 s: median, max |")
	t.Logf("| %d | %s | %d | %d | %d | %d | %s | %s | %s | %.1f MB | %.1f MB, %.1f MB |", len(msgs), span, len(faults), lost, early, dups,
		pct(0.5), pct(0.99), late[len(late)-1].Round(time.Millisecond), float64(retained[len(retained)-1])/1e6,
		float64(settled[len(settled)/2])/1e6, float64(settled[len(settled)-1])/1e6)
	if lost > 0 || early > 0 {
		t.Errorf("%d lost, %d early", lost, early)
	}
}

// scheduleLead is how long after its write the bench's first message falls due. The relay records
// the 100,000 rows meanwhile. A message due before its record landed would measure the relay's drain.
const scheduleLead = 30 * time.Second

// writeSpread writes n table rows due at random times from lead to span after now, in transactions
// of 5,000, every other one deleting its rows again.
func (w *world) writeSpread(n int, span, lead time.Duration) []scheduled {
	w.t.Helper()
	ctx := context.Background()
	var out []scheduled
	for done := 0; done < n; done += 5000 {
		k := min(5000, n-done)
		err := pgx.BeginFunc(ctx, w.conn, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, deliver_at)
				SELECT 'order', i::text, 'order.reminder', '{}',
				       pg_catalog.clock_timestamp() + ($3::float8 + pg_catalog.random() * $2::float8) * interval '1 second'
				  FROM pg_catalog.generate_series(1, $1::int) i RETURNING id::text, deliver_at`, k, (span - lead).Seconds(), lead.Seconds())
			if err != nil {
				return err
			}
			ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (scheduled, error) {
				var s scheduled
				return s, r.Scan(&s.id, &s.deliverAt)
			})
			if err != nil {
				return err
			}
			out = append(out, ms...)
			if done/5000%2 == 1 {
				_, err = tx.Exec(ctx, "DELETE FROM outbox")
			}
			return err
		})
		if err != nil {
			w.t.Fatal(err)
		}
	}
	return out
}

// waiting returns the messages in the schedule; -1 while the server cannot say.
func (w *world) waiting() int {
	n := -1
	_ = w.conn.QueryRow(context.Background(), "SELECT pg_catalog.count(*) FROM walbox_schedule").Scan(&n)
	return n
}

// retainedWAL returns the WAL the slot keeps, in bytes; 0 while the server cannot say.
func (w *world) retainedWAL() int64 {
	var n int64
	_ = w.conn.QueryRow(context.Background(), `SELECT coalesce(pg_catalog.pg_current_wal_lsn() - restart_lsn, 0)::int8
		FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, w.slot).Scan(&n)
	return n
}

// The rate of many messages due at once, against the relay's own rate (issue 38: "at the relay's
// full rate"). It writes n rows without deliver_at while the relay is down, then n rows all due at
// one instant. Each rate is from its first arrival to its last. It logs both and their ratio. It
// logs the CPU a message of each phase too, by process: PostgreSQL, walbox, RabbitMQ and the rest. It runs only when soaking; WALBOX_SCHEDULE_BURST sizes it.
// With WALBOX_SCHEDULE_BURST_PIN=1, PostgreSQL runs on CPU 0 and the rest on CPU 1, as on machines
// of their own: a due message's extra database work then no longer takes the relay's CPU.
func TestScheduleBurstRate(t *testing.T) {
	heavy(t)
	if !soaking() {
		t.Skip("bench: runs with WALBOX_SOAK=1 (make soak)")
	}
	n := soakInt("WALBOX_SCHEDULE_BURST", 50000, 50000)
	pg := testenv.StartPostgres(t)
	testenv.RequireOwn(t, pg)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	if pin, _ := strconv.ParseBool(os.Getenv("WALBOX_SCHEDULE_BURST_PIN")); pin {
		pinDatabase(t, pg)
	}
	arrivals := w.consumeArrivals()
	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	r.Kill()

	plain := w.writeBurst(n, "NULL")
	cpu := cpuOfTest(t)
	r = w.startRelay()
	plainRate := burstRate(t, arrivals, plain)
	plainCPU := cpuOfTest(t).less(cpu)

	var due time.Time
	if err := w.conn.QueryRow(context.Background(), "SELECT pg_catalog.clock_timestamp() + interval '30 seconds'").Scan(&due); err != nil {
		t.Fatal(err)
	}
	sched := w.writeBurst(n, "$2::timestamptz", due)
	time.Sleep(time.Until(due.Add(-time.Second))) // the recording is done; what follows is the sending
	cpu = cpuOfTest(t)
	schedRate := burstRate(t, arrivals, sched)
	schedCPU := cpuOfTest(t).less(cpu)
	t.Logf("| rows | relay, msg/s | due at once, msg/s | ratio |")
	t.Logf("| %d | %.0f | %.0f | %.2f |", n, plainRate, schedRate, schedRate/plainRate)
	t.Logf("| process | CPU µs a message: relay | due at once |")
	for _, c := range slices.Sorted(maps.Keys(schedCPU)) {
		if plainCPU[c] > 0 || schedCPU[c] > 0 {
			t.Logf("| %s | %.1f | %.1f |", c, plainCPU.perMessage(c, n), schedCPU.perMessage(c, n))
		}
	}
	t.Logf("| all | %.1f | %.1f |", plainCPU.perMessage("", n), schedCPU.perMessage("", n))
	r.Stop(time.Minute)
}

// pinDatabase binds PostgreSQL to CPU 0, and this test with every other process it started, or
// starts later, to CPU 1.
func pinDatabase(t *testing.T, pg *testenv.Postgres) {
	t.Helper()
	if runtime.NumCPU() < 2 {
		t.Fatalf("WALBOX_SCHEDULE_BURST_PIN needs two CPUs; this machine has %d", runtime.NumCPU())
	}
	if err := testenv.PinTree(os.Getpid(), 1); err != nil {
		t.Fatal(err)
	}
	if err := testenv.PinTree(pg.PID(), 0); err != nil {
		t.Fatal(err)
	}
	t.Log("PostgreSQL runs on CPU 0; RabbitMQ, walbox and this test on CPU 1")
}

// writeBurst writes n rows in transactions of 5,000, deliver_at set by the SQL expression at, and
// returns their ids.
func (w *world) writeBurst(n int, at string, args ...any) []string {
	w.t.Helper()
	ctx := context.Background()
	var ids []string
	for done := 0; done < n; done += 5000 {
		rows, err := w.conn.Query(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, deliver_at)
			SELECT 'order', i::text, 'order.reminder', '{}', `+at+` FROM pg_catalog.generate_series(1, $1::int) i RETURNING id::text`,
			append([]any{min(5000, n-done)}, args...)...)
		if err != nil {
			w.t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			w.t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	return ids
}

// burstRate waits for every id to arrive and returns the messages a second from the first arrival
// to the last.
func burstRate(t *testing.T, arrivals func() map[string]arrival, ids []string) float64 {
	t.Helper()
	var got map[string]arrival
	all := func() bool {
		got = arrivals()
		for _, id := range ids {
			if _, ok := got[id]; !ok {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(5 * time.Minute); !all(); time.Sleep(time.Second) { // a copy a second: the consumer keeps up
		if time.Now().After(deadline) {
			t.Fatal("the burst did not arrive within 5 minutes")
		}
	}
	first, last := got[ids[0]].first, got[ids[0]].first
	for _, id := range ids {
		at := got[id].first
		if at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	return float64(len(ids)) / last.Sub(first).Seconds()
}

// cpuOfTest returns the CPU time used so far by the test and every process it started, by command:
// its servers, walbox, and the test with its consumer.
func cpuOfTest(t *testing.T) commandCPU {
	t.Helper()
	cpu, err := testenv.TreeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return cpu
}

// commandCPU is CPU time by command.
type commandCPU map[string]time.Duration

// less returns c minus an earlier reading.
func (c commandCPU) less(before commandCPU) commandCPU {
	out := commandCPU{}
	for k, d := range c {
		out[k] = d - before[k]
	}
	return out
}

// perMessage returns the microseconds a message of command's CPU over n messages; "" sums all.
func (c commandCPU) perMessage(command string, n int) float64 {
	var d time.Duration
	for k, v := range c {
		if command == "" || k == command {
			d += v
		}
	}
	return float64(d.Microseconds()) / float64(n)
}
