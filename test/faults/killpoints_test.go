package faults_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// The kill points each test of this file kills at; together, every point.
var (
	relayPoints   = []string{"begin", "row.next", "publish.sent", "confirm.acked", "report.recorded", "report.sent", "keepalive"}
	recoverPoints = []string{"recover.created", "recover.published"}
	prunePoints   = []string{"prune.deleted"}
	standbyPoints = []string{"standby.took"}
	reshardPoints = []string{"reshard.published", "slot.created", "reshard.slot", "retire.dropped", "retire.forgot"}
	// streamPoints are the stream publisher's own, killed at among the relay's: a batch written
	// before its confirms; a message confirmed at once on the replay after a confirm not recorded.
	streamPoints = []string{"stream.flushed", "stream.stored"}
	runPoints    = []string{"run.created"} // the relay creates its slot: migrate --no-slot
)

// Every kill point is killed at by a test: a point added to the code needs a test here.
func TestEveryKillPointIsCovered(t *testing.T) {
	covered := slices.Concat(relayPoints, recoverPoints, prunePoints, standbyPoints, reshardPoints, streamPoints, runPoints,
		schedulePoints, parkedPoints)
	for _, p := range killpoint.Points {
		if !slices.Contains(covered, p) {
			t.Errorf("kill point %q is killed at by no test of killpoints_test.go", p)
		}
	}
	for _, p := range covered {
		if !slices.Contains(killpoint.Points, p) {
			t.Errorf("killpoints_test.go kills at %q, which is not a kill point", p)
		}
	}
}

// killBin returns walbox built with kill points.
func killBin(t *testing.T) string {
	t.Helper()
	return testenv.Build(t, "cmd/walbox", "-race", "-tags=killpoints")
}

// killedAt runs the walbox command args with the kill point armed at its hit-th pass and checks
// that the kill ended it there.
func (w *world) killedAt(point string, hit int, args ...string) {
	w.t.Helper()
	w.killedWith(nil, point, hit, args...)
}

// killedWith is killedAt with the settings env.
func (w *world) killedWith(env []string, point string, hit int, args ...string) {
	w.t.Helper()
	cmd := exec.Command(killBin(w.t), args...)
	cmd.Env = w.env(append([]string{killpoint.Env + "=" + point + ":" + itoa(hit)}, env...))
	out, code := testenv.Run(w.t, cmd, 2*time.Minute)
	w.checkKilled(point, hit, code, out)
	soakKill(point)
}

// killRunAt runs walbox run, built with kill points, with the point armed at its hit-th pass and
// the settings extra, and checks that the kill ended it there.
func (w *world) killRunAt(point string, hit int, extra ...string) {
	w.t.Helper()
	p := w.startKillRun(point, hit, extra...)
	w.checkKilled(point, hit, p.Wait(2*time.Minute), p.Output())
	soakKill(point)
}

// startKillRun starts walbox run, built with kill points, with the point armed at its hit-th
// pass and the settings extra.
func (w *world) startKillRun(point string, hit int, extra ...string) *testenv.Program {
	w.t.Helper()
	cmd := exec.Command(killBin(w.t), "run")
	cmd.Env = w.env(append([]string{"WALBOX_LISTEN=" + testenv.FreeAddr(w.t), killpoint.Env + "=" + point + ":" + itoa(hit)}, extra...))
	return testenv.Start(w.t, cmd)
}

// checkKilled fails the test unless the process ended by the kill at point. The caller counts
// the kill (soakKill).
func (w *world) checkKilled(point string, hit, code int, out string) {
	w.t.Helper()
	if code != -1 {
		w.t.Fatalf("walbox exited %d, not by the kill at %s:\n%s", code, point, testenv.Tail(out, 40))
	}
	if want := "walbox: kill point " + point + " hit " + itoa(hit) + ": SIGKILL"; !strings.Contains(out, want) {
		w.t.Fatalf("walbox died without %q:\n%s", want, testenv.Tail(out, 40))
	}
}

// killAt is the hit of each point at which the relay kills itself: past the first, so that the
// relay is streaming and, for the report points, has moved the slot before.
const killAt = 3

// The relay, built with kill points, kills itself at each named boundary in turn while a writer
// commits transactions of up to 40 rows, about a third of them emitted messages (walbox_emit)
// mixed with table rows, so that a kill between two changes may fall between an emitted message
// and a row: a Begin decoded, between two rows of a transaction, a
// publish not yet confirmed, a confirm not yet recorded, a record not yet reported, a report
// sent, a keepalive's step. Each point must be hit: the process dies by SIGKILL after saying which
// point killed it. The next relay starts from the slot as it was; at the end a relay built
// without kill points drains, and nothing may be lost, invented or delivered out of order.
func TestRelayKilledAtEveryPoint(t *testing.T) {
	heavy(t)
	killRounds(t, 2, relayKilledAtEveryPoint)
}

func relayKilledAtEveryPoint(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	v := w.startVerifier()
	cw := w.newWriter(checker.WriterConfig{Seed: 36, MaxTx: 40, Pause: 10 * time.Millisecond, Emit: 0.3})
	w.killBetweenEmitAndRow(cw)
	wr := w.runWriter(cw)
	start := time.Now()
	for _, point := range relayPoints {
		t.Run(point, func(t *testing.T) {
			from := v.Count()
			w.in(t).killRunAt(point, killAt)
			t.Logf("killed at %s after %d deliveries (%d in this run)", point, v.Count(), v.Count()-from)
		})
	}
	wr.stop()
	w.startRelay()
	w.verdict(wr.Writer, v, 3*time.Minute, len(relayPoints), len(relayPoints),
		"kills_over="+time.Since(start).Round(time.Second).String())
}

// walbox recover is killed after it created the new slot, before it published anything, and again
// after it published the gap and the broker confirmed it, before it reset the record. Each time
// the new slot is ahead of the record: walbox run refuses it, and the next recover replaces it
// and publishes the whole gap again. At the end nothing of the gap may be lost.
func TestRecoverKilledAtEveryPoint(t *testing.T) {
	heavy(t)
	killRounds(t, 3, recoverKilledAtEveryPoint)
}

func recoverKilledAtEveryPoint(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	v, wr := w.streamingWriter(361)
	w.dropSlot()
	w.expectRefusal(w.relays[0], "will not recreate")
	for _, point := range recoverPoints {
		w.killedAt(point, 1, "recover")
		w.expectRefusal(w.startRelay(), "ahead of")
	}
	w.recoverAndContinue(v, wr, "ahead at")
}

// A relay publishing into a stream is killed and its slot dropped while rows commit, a tenth of
// the transactions rolled back. walbox recover into the stream is killed after it created the new
// slot, and again after the broker confirmed the whole gap, before it reset the record: each time
// walbox run refuses the new slot. recover, run again to the end, finds the rows the stream holds
// by their ids, and the relay goes on. The stream holds every committed row once, and nothing
// rolled back.
func TestRecoverIntoStreamKilledAtEveryPoint(t *testing.T) {
	heavy(t)
	killRounds(t, 3, recoverIntoStreamKilledAtEveryPoint)
}

func recoverIntoStreamKilledAtEveryPoint(t *testing.T) {
	rabbit := testenv.SharedRabbitStream(t)
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	env, sr := newStream(t, rabbit)
	wr := w.startWriter(checker.WriterConfig{Seed: 366, MaxTx: 10, Pause: 10 * time.Millisecond, Rollback: 0.1})
	r := w.startRelay(env...)
	r.waitState("streaming", time.Minute)
	sr.progress(t, 300, time.Minute)
	r.Kill()
	w.dropSlot()
	time.Sleep(time.Second) // the gap grows
	wr.stop()
	if err := wr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the killed relay's last messages are stored by now
	if gap := len(wr.Committed()) - sr.count(); gap <= 0 {
		t.Fatalf("the stream holds every committed row before recover: no gap, and the test proves nothing")
	}
	for _, point := range recoverPoints {
		w.killedWith(env, point, 1, "recover")
		w.expectRefusal(w.startRelay(env...), "ahead of")
	}
	if out, code := w.walbox(env, "recover"); code != 0 || !strings.Contains(out, "into stream ") {
		t.Fatalf("walbox recover, run again after the kills, exited %d:\n%s", code, out)
	}
	after := w.startWriter(checker.WriterConfig{Seed: 367, Name: "after", MaxTx: 10, Pause: 10 * time.Millisecond})
	w.startRelay(env...).waitState("streaming", time.Minute)
	sr.progress(t, 100, time.Minute)
	after.stop()
	if err := after.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if wr.Stats().RolledBack == 0 {
		t.Error("the writer rolled back no transaction: the test proved little")
	}
	sr.checkOnce(t, append(wr.Committed(), after.Committed()...), fmt.Sprintf("rolled_back=%d", wr.Stats().RolledBack))
}

// walbox prune is killed with a batch deleted and counted in walbox_deletes, not yet committed:
// the batch rolls back whole. prune runs again, and the relay, which kept streaming, loses
// nothing.
func TestPruneKilledAtEveryPoint(t *testing.T) {
	heavy(t)
	killRounds(t, 3, pruneKilledAtEveryPoint)
}

func pruneKilledAtEveryPoint(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	v, wr := w.streamingWriter(362)
	time.Sleep(2 * time.Second) // rows older than prune's cutoff, confirmed
	var cut time.Time
	if err := w.conn.QueryRow(t.Context(), "SELECT pg_catalog.now()").Scan(&cut); err != nil {
		t.Fatal(err)
	}
	// A transaction begun before the cut has rows created before it; they show once it commits.
	waitFor(t, time.Minute, "the transactions begun before the cut to end", func() bool {
		var open bool
		err := w.conn.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE datname = pg_catalog.current_database()
			AND backend_type = 'client backend' AND xact_start <= $1 AND pid <> pg_catalog.pg_backend_pid())`, cut).Scan(&open)
		return err == nil && !open
	})
	old := func() (n int) {
		if err := w.conn.QueryRow(t.Context(), "SELECT count(*) FROM public.outbox WHERE created_at <= $1", cut).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := old()
	for _, point := range prunePoints {
		w.killedAt(point, 1, "prune", "--older-than", "1s")
		if n := old(); n != before {
			t.Fatalf("prune killed at %s before its commit: %d old rows left, were %d; want the batch rolled back", point, n, before)
		}
	}
	if out, code := w.walbox(nil, "prune", "--older-than", "1s"); code != 0 || old() >= before {
		t.Fatalf("walbox prune after the kill exited %d and left %d of %d old rows; want 0 and some deleted:\n%s", code, old(), before, out)
	}
	w.progress(v, 200, time.Minute)
	wr.stop()
	w.verdict(wr.Writer, v, 2*time.Minute, len(prunePoints), len(prunePoints), "")
}

// A relay waits as a standby while another streams. The active relay is killed; the standby takes
// the slot and is killed at once, before it streams anything. A relay started afterwards takes
// over from the slot, and nothing is lost.
func TestStandbyKilledAtEveryPoint(t *testing.T) {
	heavy(t)
	killRounds(t, 3, standbyKilledAtEveryPoint)
}

func standbyKilledAtEveryPoint(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	v := w.startVerifier()
	wr := w.startWriter(checker.WriterConfig{Seed: 363, MaxTx: 10, Pause: 10 * time.Millisecond})
	for _, point := range standbyPoints {
		active := w.startRelay()
		active.waitState("streaming", time.Minute)
		cmd := exec.Command(killBin(t), "run")
		addr := testenv.FreeAddr(t)
		cmd.Env = w.env([]string{"WALBOX_LISTEN=" + addr, killpoint.Env + "=" + point + ":1"})
		standby := &relay{Program: testenv.Start(t, cmd), t: t, addr: addr}
		standby.waitState("standby", time.Minute)
		w.progress(v, 200, time.Minute)
		active.Kill()
		w.checkKilled(point, 1, standby.Wait(2*time.Minute), standby.Output())
		soakKill(point)
	}
	w.startRelay().waitState("streaming", time.Minute)
	w.progress(v, 200, time.Minute)
	wr.stop()
	w.verdict(wr.Writer, v, 2*time.Minute, len(standbyPoints), 2*len(standbyPoints), "")
}

// Resharding from 2 shards to 3 under load, walbox reshard is killed at each of its steps, each
// run one step further than the last: the new publications created, no slot yet; the first new
// slot created, not recorded; the first recorded as found and the second created and recorded.
// Run again, it finishes and waits for the cut. The new relays start and the old ones stop. Then
// walbox reshard --retire is killed with the first old slot dropped and forgotten and the second
// dropped, its record kept; and again with both forgotten, the publications kept. Run again, it
// retires the old set. Each state is one a rerun finishes from: one set of 3 remains, and
// nothing is lost or out of order.
func TestReshardKilledAtEveryPoint(t *testing.T) {
	heavy(t)
	killRounds(t, 3, reshardKilledAtEveryPoint)
}

func reshardKilledAtEveryPoint(t *testing.T) {
	w, v, wr, old := twoShardsUnderLoad(t, 364)
	w.progress(v, 300, time.Minute)
	w.reshardKilled(old, nil, func() { w.progress(v, 300, time.Minute) })
	wr.stop()
	w.verdict(wr.Writer, v, 3*time.Minute, len(reshardPoints), len(reshardPoints), "")
}

// TestReshardKilledAtEveryPoint, with every relay publishing into one stream. The new set's
// relays skip the rows committed before the cut, which the old set delivers, so no row before
// the cut is stored twice; the kills do not change that. Nothing is lost or phantom.
func TestStreamReshardKilledAtEveryPoint(t *testing.T) {
	heavy(t)
	killRounds(t, 2, streamReshardKilledAtEveryPoint)
}

func streamReshardKilledAtEveryPoint(t *testing.T) {
	rabbit := testenv.SharedRabbitStream(t)
	w := newShardedWorldOn(t, testenv.SharedPostgres(t), rabbit, 2)
	env, sr := newStream(t, rabbit)
	wr := w.startWriter(checker.WriterConfig{Seed: 368, Aggregates: 40, MaxTx: 5, Pause: 5 * time.Millisecond})
	old := []*relay{w.startShard(0, 2, env...), w.startShard(1, 2, env...)}
	sr.progress(t, 300, 2*time.Minute)
	w.reshardKilled(old, env, func() { sr.progress(t, 300, 2*time.Minute) })
	wr.stop()
	if err := wr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	committed := wr.Committed()
	sr.checkCut(t, committed, w.cutOf(3))
	var deliveries []checker.Delivery
	for _, m := range sr.messages() {
		deliveries = append(deliveries, checker.Parse(fmt.Sprint(m.Properties.MessageID), m.GetData()))
	}
	rep := checker.Check(committed, deliveries)
	t.Logf("SUMMARY %s %s", t.Name(), rep)
	soakReport(t.Name(), rep)
	if rep.Lost != 0 || rep.Phantom != 0 {
		t.Errorf("the stream lost %d rows and holds %d phantom", rep.Lost, rep.Phantom)
	}
}

// reshardKilled reshards from the two shards whose relays old run with the settings env to
// three, killed at each step: walbox reshard, each run one step further (the new publications
// created, no slot yet; the first new slot created, not recorded; the first recorded as found
// and the second created and recorded). After each kill an old relay is started again: it reads
// the reshard half done. reshard, run again, finishes and waits for the cut; the new relays
// start; progress waits for deliveries; the old relays stop. walbox reshard --retire is killed
// with the first old slot dropped and forgotten and the second dropped, its record kept; and
// again with both forgotten, the publications kept. Run again, it retires the old set, and one
// set of 3 remains.
func (w *world) reshardKilled(old []*relay, env []string, progress func()) {
	t := w.t
	t.Helper()
	reshard := []string{"reshard", "--shards", "3"}
	for i, step := range []struct {
		point string
		hit   int
	}{{"reshard.published", 1}, {"slot.created", 1}, {"reshard.slot", 2}} {
		w.killedAt(step.point, step.hit, reshard...)
		k := i % len(old)
		old[k].Kill()
		old[k] = w.startShard(k, 2, env...)
		old[k].waitState("streaming", time.Minute)
	}
	if out, code := w.walbox(nil, append(reshard, "--wait", "90s")...); code != 0 {
		t.Fatalf("walbox reshard --shards 3, run again after the kills, exited %d:\n%s", code, out)
	}
	for k := range 3 {
		w.startShard(k, 3, env...)
	}
	progress()
	for _, r := range old {
		if code := r.Stop(30 * time.Second); code != 0 {
			t.Errorf("old relay exited %d", code)
		}
	}
	retire := append(reshard, "--retire")
	w.killedAt("retire.dropped", 2, retire...)
	w.killedAt("retire.forgot", 2, retire...)
	if out, code := w.walbox(nil, retire...); code != 0 {
		t.Fatalf("walbox reshard --shards 3 --retire, run again after the kills, exited %d:\n%s", code, out)
	}
	progress()
	out, code := w.walbox(nil, "status", "--json")
	var st struct {
		Sets []struct {
			Shards int `json:"shards"`
		} `json:"shard_sets"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || len(st.Sets) != 1 || st.Sets[0].Shards != 3 {
		t.Errorf("walbox status after the reshard exited %d with %+v (%v); want one set of 3:\n%s", code, st, err, out)
	}
}

// A kill between an emitted message and a table row of one transaction, in either order, is not
// left to chance: two transactions, an emitted message then a row, and a row then an emitted
// message, are committed while no relay runs. The relay then passes between two changes of a
// transaction exactly twice, once in each, and is killed at the first pass, then (the first
// transaction replayed) at the second. cw's rows count in the test's verdict.
func (w *world) killBetweenEmitAndRow(cw *checker.Writer, extra ...string) {
	w.t.Helper()
	for _, order := range [][]bool{{true, false}, {false, true}} {
		if err := cw.TxMixed(w.t.Context(), order...); err != nil {
			w.t.Fatal(err)
		}
	}
	w.killRunAt("row.next", 1, extra...)
	w.killRunAt("row.next", 2, extra...)
}

// drainStream stops the writer, lets a relay without kill points with the settings env drain
// into the stream sr reads, and checks that the stream holds every committed row exactly once,
// in commit order.
func (w *world) drainStream(wr *writer, sr *streamReader, env []string) {
	t := w.t
	t.Helper()
	wr.stop()
	if err := wr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.startRelay(env...)
	committed := wr.Committed()
	sr.wait(t, len(committed), 3*time.Minute)
	time.Sleep(3 * time.Second) // anything stored twice would be there by now
	checkStream(t, committed, sr.messages(), wr.Stats())
}

// pointHits is the hit at which the modes' test kills at a point; killAt for any other.
// stream.stored is sure to be hit once on the replay after the kill at confirm.acked.
var pointHits = map[string]int{"stream.stored": 1}

// killAtEach runs the kill-built relay with the settings extra(i), killed at points[i] in turn.
func (w *world) killAtEach(points []string, extra func(i int) []string) {
	for i, point := range points {
		hit, ok := pointHits[point]
		if !ok {
			hit = killAt
		}
		w.t.Run(point, func(t *testing.T) { w.in(t).killRunAt(point, hit, extra(i)...) })
	}
}

// The relay in its other modes is killed at every point it passes, each once, while a writer
// commits transactions of table rows and emitted messages mixed; a relay without kill points
// then drains, and the checker judges what arrived:
//   - stream: a stream relay, at the relay's points and the stream publisher's own, after the
//     kills between an emitted message and a row, a tenth of the transactions rolled back. The
//     stream must hold every committed row exactly once, in commit order, and nothing else.
//   - shards: the relays of two shards in turn, each with its row filter and every emitted
//     message of both, into one queue.
//   - least privilege: a relay whose role has LOGIN and REPLICATION only, first killed as it
//     created its slot (walbox migrate --no-slot ran as the table's owner), before it recorded it.
//   - lanes: a relay publishing over three lanes.
func TestRelayModesKilledAtEveryPoint(t *testing.T) {
	heavy(t)
	killRounds(t, 2, relayModesKilledAtEveryPoint)
}

func relayModesKilledAtEveryPoint(t *testing.T) {
	cfg := checker.WriterConfig{Seed: 365, Aggregates: 40, MaxTx: 30, Pause: 10 * time.Millisecond, Emit: 0.3}
	t.Run("stream", func(t *testing.T) {
		rabbit := testenv.SharedRabbitStream(t)
		w := newWorld(t, testenv.SharedPostgres(t), rabbit)
		env, sr := newStream(t, rabbit)
		cfg := cfg
		cfg.Rollback = 0.1 // the stream must hold nothing rolled back
		cw := w.newWriter(cfg)
		w.killBetweenEmitAndRow(cw, env...)
		wr := w.runWriter(cw)
		points := []string{"begin", "row.next", "publish.sent", "stream.flushed", "confirm.acked", "stream.stored",
			"report.recorded", "report.sent", "keepalive"}
		w.killAtEach(points, func(int) []string { return env })
		w.drainStream(wr, sr, env)
	})
	t.Run("shards", func(t *testing.T) {
		const n = 2
		w := newShardedWorld(t, n)
		v := w.startVerifier()
		wr := w.startWriter(cfg)
		w.killAtEach(relayPoints, func(i int) []string { return []string{"WALBOX_SHARDS=" + itoa(n), "WALBOX_SHARD=" + itoa(i%n)} })
		wr.stop()
		for k := range n {
			w.startShard(k, n)
		}
		w.verdict(wr.Writer, v, 3*time.Minute, len(relayPoints), len(relayPoints), "shards=2")
	})
	t.Run("least privilege", func(t *testing.T) {
		w := leastPrivilegedWorld(t)
		for _, point := range runPoints {
			w.killRunAt(point, 1)
		}
		v := w.startVerifier()
		wr := w.startWriter(cfg)
		w.killAtEach(relayPoints, func(int) []string { return nil })
		wr.stop()
		w.startRelay()
		w.verdict(wr.Writer, v, 3*time.Minute, len(relayPoints), len(relayPoints)+len(runPoints), "relay_role=LOGIN_REPLICATION_only")
	})
	t.Run("lanes", func(t *testing.T) {
		w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
		v := w.startVerifier()
		cw := w.newWriter(cfg)
		w.killBetweenEmitAndRow(cw, "WALBOX_LANES=3")
		wr := w.runWriter(cw)
		w.killAtEach(relayPoints, func(int) []string { return []string{"WALBOX_LANES=3"} })
		wr.stop()
		w.startRelay("WALBOX_LANES=3")
		w.verdict(wr.Writer, v, 3*time.Minute, len(relayPoints), len(relayPoints)+2, "lanes=3")
	})
}

// leastPrivilegedWorld is newWorld with roles of its own on the shared server: the database and
// the outbox belong to one, which ran walbox migrate --no-slot --relay-role; the relay connects as
// the other, which has LOGIN and REPLICATION only, and creates its slot itself.
func leastPrivilegedWorld(t *testing.T) *world {
	t.Helper()
	pg := testenv.SharedPostgres(t)
	owner, relayRole := testenv.UniqueName("owner"), testenv.UniqueName("relay")
	t.Cleanup(func() { pg.Exec(t, pg.URL(), "DROP ROLE IF EXISTS "+relayRole+", "+owner) }) // after the database
	pg.Exec(t, pg.URL(), "CREATE ROLE "+owner+" LOGIN")
	pg.Exec(t, pg.URL(), "CREATE ROLE "+relayRole+" LOGIN REPLICATION")
	u, err := url.Parse(pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	pg.Exec(t, pg.URL(), "ALTER DATABASE "+strings.TrimPrefix(u.Path, "/")+" OWNER TO "+owner)
	asRole := func(role string) string {
		as := *u
		as.User = url.User(role)
		return as.String()
	}
	w := &world{t: t, pg: pg, rabbit: testenv.SharedRabbit(t), db: asRole(owner), relayDB: asRole(relayRole),
		slot: testenv.UniqueName("slot"), exchange: testenv.UniqueName("ex"), queue: testenv.UniqueName("q"), binding: "#"}
	w.relayMQ = w.rabbit.URL()
	w.conn = pg.Conn(t, w.db)
	if out, code := w.walbox([]string{"WALBOX_DATABASE_URL=" + w.db}, "migrate", "--no-slot", "--relay-role", relayRole); code != 0 {
		t.Fatalf("walbox migrate --no-slot --relay-role %s as the owner exited %d:\n%s", relayRole, code, out)
	}
	w.declare()
	return w
}

// newStream names a stream of its own on rabbit's stream node, returns the relay's settings for
// it, and reads it from its start.
func newStream(t *testing.T, rabbit *testenv.Rabbit) (env []string, sr *streamReader) {
	t.Helper()
	name := testenv.UniqueName("events")
	return []string{"WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name}, readStream(t, rabbit.StreamURL(), name)
}

// cutOf is the cut of a reshard into n shards, by walbox's record: the latest consistent point
// of the new set's slots.
func (w *world) cutOf(n int) pglogrepl.LSN {
	w.t.Helper()
	var cutText string
	if err := execRow(w.t, w.db, "SELECT max(created_lsn)::text FROM walbox_slots WHERE slot_name LIKE $1", &cutText,
		w.slot+"_s%of"+itoa(n)); err != nil {
		w.t.Fatal(err)
	}
	cut, err := pglogrepl.ParseLSN(cutText)
	if err != nil {
		w.t.Fatal(err)
	}
	return cut
}
