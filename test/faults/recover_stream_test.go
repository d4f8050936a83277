package faults_test

import (
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/doctor"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/test/checker"
)

// A relay publishing into a stream is killed; rows are committed while it is down and its slot
// is dropped. doctor and `walbox recover --dry-run` show one plan: recover into the stream.
// `walbox recover --stream-url --stream` is SIGKILLed while it publishes the gap, then run again
// to the end, and walbox run goes on. The stream then holds every committed row exactly once:
// the rows the killed relay and the killed recover stored are not stored again. (Before, recover
// took no --stream-url and republished the gap to the exchange: 943 of 3,041 rows never reached
// the stream.)
func TestRecoverIntoStreamKilledAndRunAgain(t *testing.T) {
	heavy(t)
	rabbit := testenv.SharedRabbitStream(t)
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	name := testenv.UniqueName("events")
	env := []string{"WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name}
	sr := readStream(t, rabbit.StreamURL(), name)
	wr := w.startWriter(checker.WriterConfig{Seed: 61, MaxTx: 40, Pad: 2000})

	// The relay streams, and is killed with messages in flight; rows committed meanwhile are in
	// no stream once the slot is dropped.
	r := w.startRelay(env...)
	r.waitState("streaming", time.Minute)
	sr.progress(t, 500, time.Minute)
	r.Kill()
	time.Sleep(3 * time.Second)
	w.dropSlot()
	time.Sleep(2 * time.Second)
	wr.stop()
	if err := wr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	committed := wr.Committed()
	time.Sleep(2 * time.Second) // the killed relay's last messages are stored by now
	before := sr.count()
	if gap := len(committed) - before; gap < 2000 {
		t.Fatalf("%d committed rows, %d in the stream: a gap of %d rows is too small to kill recover in", len(committed), before, gap)
	}
	t.Logf("%d rows committed, %d in the stream before recover", len(committed), before)

	// doctor and recover --dry-run show the same plan.
	plan := doctor.StreamRecoverPlan(name)
	out, code := w.walbox(env, "recover", "--dry-run")
	if code != 0 || !strings.Contains(out, plan) || !strings.Contains(out, "missing") {
		t.Fatalf("walbox recover --dry-run exited %d; want 0, the slot missing and the plan %q:\n%s", code, plan, out)
	}
	if got := sr.count(); got != before {
		t.Fatalf("walbox recover --dry-run stored %d messages", got-before)
	}
	out, code = w.walbox(env, "doctor")
	if code == 0 || !strings.Contains(out, "walbox recover --stream-url ... --stream "+name) || !strings.Contains(out, plan) {
		t.Fatalf("walbox doctor exited %d; want non-zero, naming recover into stream %s with the plan %q:\n%s", code, name, plan, out)
	}

	// recover, SIGKILLed once it stored some of the gap.
	cmd := exec.Command(walboxBin(t), "recover")
	cmd.Env = w.env(env)
	p := testenv.Start(t, cmd)
	waitFor(t, 2*time.Minute, "recover to store rows", func() bool { return sr.count() > before })
	p.Signal(syscall.SIGSTOP)
	time.Sleep(time.Second)
	stored := sr.count() - before
	p.Kill()
	if stored >= len(committed)-before {
		t.Fatalf("recover stored all %d rows of the gap before it was killed: the test proves nothing about a kill", stored)
	}
	t.Logf("recover killed with %d of the gap's %d rows stored", stored, len(committed)-before)

	// Run again to the end, then walbox run goes on from the new slot.
	out, code = w.walbox(env, "recover")
	if code != 0 || !strings.Contains(out, "into stream "+name) {
		t.Fatalf("walbox recover exited %d:\n%s", code, out)
	}
	t.Logf("walbox recover run again:\n%s", out)
	wr2 := w.startWriter(checker.WriterConfig{Seed: 62, Name: "after", MaxTx: 10, Pause: 10 * time.Millisecond})
	r = w.startRelay(env...)
	r.waitState("streaming", time.Minute)
	time.Sleep(2 * time.Second)
	wr2.stop()
	if err := wr2.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	all := append(committed, wr2.Committed()...)
	sr.checkOnce(t, all, fmt.Sprintf("killed_recover_stored=%d", stored))
}

// `walbox recover` given a stream that does not exist (a typo, or --stream left at its default
// while run publishes elsewhere) exits 2 naming it, before it touches the slot, and declares no
// stream: the gap's rows would have gone where no consumer reads them, and recover would have
// reset the record. (Before, it declared the stream, published the gap into it and exited 0.)
func TestRecoverRefusesAStreamThatDoesNotExist(t *testing.T) {
	heavy(t)
	rabbit := testenv.SharedRabbitStream(t)
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	name := testenv.UniqueName("events")
	env := []string{"WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name}
	sr := readStream(t, rabbit.StreamURL(), name)
	wr := w.startWriter(checker.WriterConfig{Seed: 63, MaxTx: 10})
	r := w.startRelay(env...)
	r.waitState("streaming", time.Minute)
	sr.progress(t, 50, time.Minute)
	r.Kill()
	w.dropSlot()
	wr.stop()
	if err := wr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}

	wrong := name + "s"
	for _, args := range [][]string{{"recover", "--dry-run", "--stream", wrong}, {"recover", "--stream", wrong}} {
		out, code := w.walbox(env, args...)
		if code != 2 || !strings.Contains(out, "--stream (WALBOX_STREAM): stream "+wrong+" does not exist") {
			t.Errorf("walbox %s exited %d; want 2, naming stream %s:\n%s", strings.Join(args, " "), code, wrong, out)
		}
	}
	if exists, _, _ := w.slotInfo(); exists {
		t.Error("recover created the slot though it refused the stream")
	}
	ok, err := streampub.Exists([]string{rabbit.StreamURL()}, wrong)
	if err != nil || ok {
		t.Errorf("stream %s exists: %v (%v); recover declared it", wrong, ok, err)
	}
	if out, code := w.walbox(env, "recover"); code != 0 || !strings.Contains(out, "into stream "+name) {
		t.Fatalf("walbox recover into stream %s exited %d:\n%s", name, code, out)
	}
}

// Two PostgreSQL clusters, each with walbox on one slot name, publish into one stream. One
// cluster's relay is killed and its slot dropped while the other's goes on publishing; walbox
// recover publishes the gap under the first relay's name, reading back past the other's
// messages, and its relay then numbers on after the recovered rows. The stream holds every
// committed row of both databases exactly once.
func TestRecoverIntoAStreamTwoClustersShare(t *testing.T) {
	heavy(t)
	rabbit := testenv.SharedRabbitStream(t)
	name := testenv.UniqueName("events")
	env := []string{"WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name}
	sr := readStream(t, rabbit.StreamURL(), name)
	slot := testenv.UniqueName("slot")
	type cluster struct {
		w      *world
		wr     *writer
		r      *relay
		system string
	}
	var cs []*cluster
	for i := range 2 {
		pg := testenv.SharedPostgres(t)
		if i == 1 {
			pg = testenv.StartPostgres(t)
		}
		c := &cluster{w: newWorldOn(t, pg, rabbit, slot, "#", nil)}
		if err := execRow(t, c.w.db, "SELECT system_identifier::text FROM pg_control_system()", &c.system); err != nil {
			t.Fatal(err)
		}
		c.wr = c.w.startWriter(checker.WriterConfig{Seed: uint64(64 + i), MaxTx: 20, Pause: 5 * time.Millisecond, Rollback: 0.1})
		c.r = c.w.startRelay(env...)
		cs = append(cs, c)
	}
	a := cs[0]
	sr.progress(t, 600, 2*time.Minute)
	a.r.Kill()
	a.w.dropSlot()
	sr.progress(t, 300, 2*time.Minute) // the other cluster's rows, after the first's last
	out, code := a.w.walbox(env, "recover")
	if code != 0 || !strings.Contains(out, "into stream "+name) {
		t.Fatalf("walbox recover exited %d:\n%s", code, out)
	}
	t.Logf("walbox recover:\n%s", out)
	a.r = a.w.startRelay(env...)
	a.r.waitState("streaming", time.Minute)
	sr.progress(t, 300, 2*time.Minute)
	var all []checker.Row
	for _, c := range cs {
		c.wr.stop()
		if err := c.wr.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		all = append(all, c.wr.Committed()...)
	}
	sr.checkOnce(t, all, "")
}

// A relay decodes on a hot standby (--replication-url) into a stream; it is killed and the
// standby's slot dropped. walbox recover --replication-url --stream-url creates the new slot on
// the standby, reads the gap there, and publishes it under the relay's producer name; the relay
// then numbers on after it. The stream holds every committed row once.
func TestRecoverIntoAStreamFromAStandby(t *testing.T) {
	heavy(t)
	primary := testenv.StartPostgres(t, testenv.PGVersion(17))
	testenv.RequireOwn(t, primary)
	standby := testenv.StartStandby(t, primary, "standby1", testenv.WithSetting("hot_standby_feedback", "on"))
	rabbit := testenv.SharedRabbitStream(t)
	w := newWorld(t, primary, rabbit)
	replURL := withHost(t, w.db, hostOf(t, standby.URL()))
	waitFor(t, time.Minute, "the database on the standby", func() bool {
		var n int
		return execRow(t, replURL, "SELECT count(*) FROM public.outbox", &n) == nil
	})
	w.slot = testenv.UniqueName("slot")
	name := testenv.UniqueName("events")
	env := []string{"WALBOX_REPLICATION_URL=" + replURL, "WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name}
	if out, code := w.walbox(env, "migrate"); code != 0 {
		t.Fatalf("walbox migrate --replication-url exited %d:\n%s", code, out)
	}
	sr := readStream(t, rabbit.StreamURL(), name)
	wr := w.startWriter(checker.WriterConfig{Seed: 66, MaxTx: 10, Pause: 5 * time.Millisecond})
	r := w.startRelay(env...)
	r.waitState("streaming", time.Minute)
	sr.progress(t, 300, time.Minute)
	r.Kill()
	waitFor(t, 30*time.Second, "the standby's slot dropped", func() bool {
		var ok bool
		return execRow(t, replURL, "SELECT true FROM pg_drop_replication_slot($1)", &ok, w.slot) == nil
	})
	time.Sleep(time.Second) // the gap grows
	out, code := w.walbox(env, "recover")
	if code != 0 || !strings.Contains(out, "into stream "+name) {
		t.Fatalf("walbox recover --replication-url --stream-url exited %d:\n%s", code, out)
	}
	t.Logf("walbox recover:\n%s", out)
	r = w.startRelay(env...)
	r.waitState("streaming", time.Minute)
	sr.progress(t, 200, time.Minute)
	wr.stop()
	if err := wr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	sr.checkOnce(t, wr.Committed(), "")
}

// Two shards publish into one stream, each under its slot's producer name. Shard 0's slot is
// dropped while shard 1 goes on; walbox recover of shard 0's slot and publication into the stream
// publishes only shard 0's rows of the gap (the publication's row filter), under shard 0's name,
// and shard 0's relay numbers on after them. The stream holds every committed row once.
func TestRecoverIntoAStreamShardsShare(t *testing.T) {
	heavy(t)
	const n = 2
	rabbit := testenv.SharedRabbitStream(t)
	w := newShardedWorldOn(t, testenv.SharedPostgres(t), rabbit, n)
	set := shard.Set{Slot: w.slot, Publication: "walbox", N: n}
	name := testenv.UniqueName("events")
	env := []string{"WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name}
	sr := readStream(t, rabbit.StreamURL(), name)
	relays := []*relay{w.startShard(0, n, env...), w.startShard(1, n, env...)}
	wr := w.startWriter(checker.WriterConfig{Seed: 67, Aggregates: 40, MaxTx: 10, Pause: 5 * time.Millisecond})
	sr.progress(t, 400, time.Minute)
	relays[0].Kill()
	s0 := w.in(t)
	s0.slot = set.SlotName(0)
	s0.dropSlot()
	sr.progress(t, 200, time.Minute) // shard 1's rows, after shard 0's last
	out, code := w.walbox(env, "recover", "--slot", set.SlotName(0), "--publication", set.PublicationName(0))
	if code != 0 || !strings.Contains(out, "into stream "+name) {
		t.Fatalf("walbox recover of shard 0 exited %d:\n%s", code, out)
	}
	t.Logf("walbox recover:\n%s", out)
	w.startShard(0, n, env...).waitState("streaming", time.Minute)
	sr.progress(t, 200, time.Minute)
	wr.stop()
	if err := wr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	sr.checkOnce(t, wr.Committed(), "")
}

// checkOnce waits until the stream holds as many messages as all has rows, and a little more for
// anything stored twice. It fails the test unless the stream holds each row of all exactly once
// and nothing else, logs the summary with extra, and records it in the soak's table.
func (sr *streamReader) checkOnce(t *testing.T, all []checker.Row, extra string) {
	t.Helper()
	sr.wait(t, len(all), 3*time.Minute)
	time.Sleep(3 * time.Second) // anything stored twice would be there by now
	var deliveries []checker.Delivery
	for _, m := range sr.messages() {
		deliveries = append(deliveries, checker.Parse(fmt.Sprint(m.Properties.MessageID), m.GetData()))
	}
	rep := checker.Check(all, deliveries)
	t.Logf("SUMMARY %s %s %s", t.Name(), rep, extra)
	soakReport(t.Name(), rep)
	if rep.Lost != 0 || rep.Phantom != 0 || rep.Duplicated != 0 {
		t.Errorf("the stream holds %d messages for %d committed rows: %d lost, %d phantom, %d stored twice",
			len(deliveries), len(all), rep.Lost, rep.Phantom, rep.Duplicated)
	}
}
