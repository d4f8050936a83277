package faults_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

const (
	setMemoryAlarm   = "rabbit_alarm:set_alarm({{resource_limit, memory, node()}, []})."
	clearMemoryAlarm = "rabbit_alarm:clear_alarm({resource_limit, memory, node()})."
)

// TestBrokerFaults runs on a RabbitMQ node of its own, which it alarms, partitions, restarts
// and kills, with a writer committing and a relay streaming throughout.
func TestBrokerFaults(t *testing.T) {
	heavy(t)
	t.Parallel() // mostly waiting on outages: it overlaps the other tests
	rabbit := testenv.StartRabbit(t)
	testenv.RequireOwn(t, rabbit)
	pg := testenv.SharedPostgres(t)

	t.Run("memory alarm blocks publishers; the replication session stays up", func(t *testing.T) {
		testMemoryAlarm(t, rabbit)
	})
	t.Run("silent network partition mid-publish", func(t *testing.T) {
		testBrokerPartition(t, pg, rabbit)
	})
	t.Run("unreachable for a long stretch", func(t *testing.T) {
		testBrokerUnreachable(t, pg, rabbit)
	})
	t.Run("graceful restart", func(t *testing.T) {
		testBrokerRestart(t, pg, rabbit, func() { rabbit.Stop(t) })
	})
	t.Run("node killed", func(t *testing.T) {
		testBrokerRestart(t, pg, rabbit, func() { rabbit.Kill(t) })
	})
}

// brokerWorld starts a verifier, a writer and a relay on a fresh world and waits until messages
// flow.
func brokerWorld(t *testing.T, w *world, seed uint64, relayEnv ...string) (*writer, *checker.Verifier, *relay) {
	t.Helper()
	v := w.startVerifier()
	wr := w.startWriter(checker.WriterConfig{Seed: seed, Pause: 40 * time.Millisecond})
	r := w.startRelay(relayEnv...)
	r.waitState("streaming", time.Minute)
	w.progress(v, 300, time.Minute)
	return wr, v, r
}

func testBrokerRestart(t *testing.T, pg *testenv.Postgres, rabbit *testenv.Rabbit, stop func()) {
	w := newWorld(t, pg, rabbit)
	wr, v, _ := brokerWorld(t, w, 21)
	stop()
	time.Sleep(time.Second) // the writer goes on committing
	rabbit.Start(t)
	w.progress(v, 300, 90*time.Second)
	wr.stop()
	w.verdict(wr.Writer, v, 2*time.Minute, 1, 1, "")
}

func testBrokerUnreachable(t *testing.T, pg *testenv.Postgres, rabbit *testenv.Rabbit) {
	outage := time.Duration(soakInt("WALBOX_SOAK_OUTAGE_SECONDS", 20, 90)) * time.Second
	w := newWorld(t, pg, rabbit)
	p := newProxy(t, hostOf(t, rabbit.URL()))
	w.relayMQ = withHost(t, rabbit.URL(), p.addr)
	wr, v, r := brokerWorld(t, w, 22)
	p.down()
	time.Sleep(outage)
	if r.Exited() {
		t.Fatalf("walbox run exited during a broker outage of %v:\n%s", outage, testenv.Tail(r.Output(), 30))
	}
	if st := r.state(); st == "streaming" {
		t.Errorf("relay reports %q after %v without a broker", st, outage)
	}
	p.up()
	took := r.waitState("streaming", 2*time.Minute)
	w.progress(v, 300, 90*time.Second)
	wr.stop()
	w.verdict(wr.Writer, v, 2*time.Minute, 1, 1, "outage="+outage.String()+" back_to_streaming_after="+took.Round(time.Millisecond).String())
}

// The proxy between relay and broker stops forwarding without closing anything. The relay must
// notice through AMQP heartbeats (2 s here), keep the slot where the broker's confirms left it,
// and carry on once the network heals.
func testBrokerPartition(t *testing.T, pg *testenv.Postgres, rabbit *testenv.Rabbit) {
	hold := time.Duration(soakInt("WALBOX_SOAK_PARTITION_SECONDS", 12, 60)) * time.Second
	w := newWorld(t, pg, rabbit)
	p := newProxy(t, hostOf(t, rabbit.URL()))
	w.relayMQ = withHost(t, rabbit.URL(), p.addr) + "?heartbeat=2"
	wr, v, r := brokerWorld(t, w, 23)
	p.partition()
	start := time.Now()
	noticed := waitFor(t, hold+30*time.Second, "the relay to notice the partition", func() bool {
		st := r.state()
		return st != "" && st != "streaming"
	})
	t.Logf("relay noticed the partition after %v", noticed.Round(time.Millisecond))
	if noticed > 15*time.Second {
		t.Errorf("relay took %v to notice a partition with 2 s heartbeats", noticed)
	}
	time.Sleep(time.Until(start.Add(hold)))
	p.heal()
	took := r.waitState("streaming", 2*time.Minute)
	w.progress(v, 300, 90*time.Second)
	wr.stop()
	w.verdict(wr.Writer, v, 2*time.Minute, 1, 1, "noticed_after="+noticed.Round(time.Millisecond).String()+
		" back_to_streaming_after_heal="+took.Round(time.Millisecond).String())
}

// A memory alarm blocks every publishing connection. The relay waits without dropping the
// replication session, whose wal_sender_timeout is 2 s here: the same walsender serves it before,
// during and after the alarm, and delivery resumes once the alarm clears.
func testMemoryAlarm(t *testing.T, rabbit *testenv.Rabbit) {
	hold := time.Duration(soakInt("WALBOX_SOAK_ALARM_SECONDS", 8, 60)) * time.Second
	pg := testenv.StartPostgres(t, testenv.WithSetting("wal_sender_timeout", "2s"))
	testenv.RequireOwn(t, pg)
	w := newWorld(t, pg, rabbit)
	wr, v, r := brokerWorld(t, w, 24, "WALBOX_STATUS_INTERVAL=1s")
	before := w.walsenderPID()
	sessions := mustStatus(t, r).Sessions

	rabbit.Ctl(t, "eval", setMemoryAlarm)
	alarmed := true
	defer func() {
		if alarmed {
			rabbit.Ctl(t, "eval", clearMemoryAlarm)
		}
	}()
	waitFor(t, 30*time.Second, "the relay to report the broker blocking it", func() bool {
		st, err := r.status()
		return err == nil && st.BrokerBlocked
	})
	blockedAt := mustStatus(t, r).Published
	if code, body, err := testenv.HTTPGet(r.addr, "/readyz"); err != nil || code != 503 || !strings.Contains(body, "blocked") {
		t.Errorf("/readyz during the alarm: %d %q (%v), want 503 blocked", code, body, err)
	}
	for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if pid := w.walsenderPID(); pid != before {
			t.Fatalf("walsender pid %d during the alarm, %d before: the replication session was dropped", pid, before)
		}
	}
	if st := mustStatus(t, r); st.Published > blockedAt+2 || st.State != "streaming" {
		t.Errorf("during the alarm: %+v, published %d when blocked", st, blockedAt)
	}
	rabbit.Ctl(t, "eval", clearMemoryAlarm)
	alarmed = false
	w.progress(v, 300, time.Minute)
	after := w.walsenderPID()
	st := mustStatus(t, r)
	if after != before || st.Sessions != sessions {
		t.Errorf("walsender pid %d after the alarm, %d before; relay sessions %d, %d before: want the same session throughout",
			after, before, st.Sessions, sessions)
	}
	checkBlockLogged(t, r.Output(), hold)
	wr.stop()
	w.verdict(wr.Writer, v, 2*time.Minute, 1, 1, "alarm="+hold.String()+" wal_sender_timeout=2s walsender_pid_kept=true")
}

// checkBlockLogged checks that one alarm under a steady writer was logged as one block, with the
// broker's reason, and one unblock that lasted at least hold: no WARN per publish or per retry.
func checkBlockLogged(t *testing.T, out string, hold time.Duration) {
	t.Helper()
	blocks := regexp.MustCompile(`level=WARN msg="broker blocks publishing[^"]*" broker=\S+ reason="low on memory"`).FindAllString(out, -1)
	unblocks := regexp.MustCompile(`level=WARN msg="broker unblocked publishing" broker=\S+ blocked_for=(\S+)`).FindAllStringSubmatch(out, -1)
	if len(blocks) != 1 || len(unblocks) != 1 {
		t.Fatalf("one alarm logged %d blocks and %d unblocks, want one each:\n%s", len(blocks), len(unblocks), testenv.Tail(out, 30))
	}
	if took, err := time.ParseDuration(unblocks[0][1]); err != nil || took < hold {
		t.Errorf("unblock logged blocked_for=%s, want at least the alarm's %v (%v)", unblocks[0][1], hold, err)
	}
}

func mustStatus(t *testing.T, r *relay) relayStatus {
	t.Helper()
	st, err := r.status()
	if err != nil {
		t.Fatalf("relay /status: %v", err)
	}
	return st
}

// walsenderPID returns the pid of the walsender streaming from the world's slot, as
// pg_stat_replication shows it; 0 if none.
func (w *world) walsenderPID() int {
	w.t.Helper()
	var pid int
	err := w.conn.QueryRow(context.Background(), `SELECT coalesce(max(r.pid), 0) FROM pg_stat_replication r
		JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1`, w.slot).Scan(&pid)
	if err != nil {
		w.t.Fatal(err)
	}
	return pid
}
