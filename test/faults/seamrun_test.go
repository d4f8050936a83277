package faults_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/test/checker"
)

// seamRun is one cell of the seam matrix being run: its servers, its world, the relays of each
// slot, the writers and what reads the messages.
type seamRun struct {
	t       *testing.T
	c       cell
	n       int // the cell's number
	pg      *testenv.Postgres
	standby *testenv.Postgres // the failover's standby
	rabbit  *testenv.Rabbit   // the broker, or the node of the cluster the checker reads from
	cluster *testenv.Cluster
	w       *world
	env     []string // every walbox command's settings: config, stream, lanes, brokers
	shards  int      // 0: the single slot
	relays  map[int][]*relay
	writers []*writer
	v       *checker.Verifier
	sr      *streamReader
	stream  string
	table   outbox.Table // the table the writers write
	columns []string
	// recoverWarned is set once walbox recover said that the gap's emitted messages are lost.
	recoverWarned bool
	// restoreAt is the index of the writer that wrote between the copy and the restore.
	restoreAt int
}

// The legacy table of the mapped and position sources, beside the outbox table, and its mapping
// in the config file.
const (
	legacyTable = "public.legacy_events"
	legacyDDL   = `CREATE TABLE public.legacy_events (
		event_id uuid PRIMARY KEY, entity text, aggregate_id text, kind text NOT NULL, body jsonb NOT NULL,
		occurred_at timestamptz NOT NULL DEFAULT now())`
	legacyConfig = `tables:
  - table: public.outbox
  - table: public.legacy_events
    id: event_id
    event-type: kind
    payload: body
    aggregate-type: entity
    aggregate-id: aggregate_id
    headers: "-"
    created-at: occurred_at
    message-id: %s
`
)

// runSeamCell runs the cell c, numbered n.
func runSeamCell(t *testing.T, n int, c cell) {
	s := &seamRun{t: t, c: c, n: n, relays: map[int][]*relay{}, table: outbox.DefaultTable}
	refused, err := refusedPairs(seamDimensions, seamRefusals)
	if err != nil {
		t.Fatal(err)
	}
	s.servers()
	s.world()
	if r, ok := c.refusedIn(refused); ok {
		s.refusal(r)
		return
	}
	s.read()
	s.startRelays()
	s.startWriter("agg")
	s.progress(200, 2*time.Minute)
	s.fault()
	if !c.is("fault", "restore") { // the relays may stop there, by design
		s.progress(200, 2*time.Minute)
	}
	s.verdict()
}

// servers starts or shares the servers the cell needs: its own where its fault would disturb
// other tests.
func (s *seamRun) servers() {
	t, c := s.t, s.c
	switch {
	case c.is("fault", "failover"):
		s.pg = testenv.StartPostgres(t, testenv.PGVersion(17))
		testenv.RequireOwn(t, s.pg)
		s.standby = testenv.StartStandby(t, s.pg, "standby1",
			testenv.WithSetting("sync_replication_slots", "on"), testenv.WithSetting("hot_standby_feedback", "on"))
		s.pg.Exec(t, s.pg.URL(), "ALTER SYSTEM SET synchronized_standby_slots = 'standby1'")
		s.pg.Exec(t, s.pg.URL(), "SELECT pg_reload_conf()")
	case c.is("fault", "pg-restart"), c.is("fault", "restore"):
		s.pg = testenv.StartPostgres(t)
		testenv.RequireOwn(t, s.pg)
	default:
		s.pg = testenv.SharedPostgres(t)
	}
	stream, kill := c.is("publisher", "stream"), c.is("fault", "broker-kill")
	switch {
	case c.is("broker", "cluster") && stream:
		s.cluster = testenv.StartStreamCluster(t)
	case c.is("broker", "cluster") && kill:
		s.cluster = testenv.StartCluster(t)
	case c.is("broker", "cluster"):
		s.cluster = testenv.SharedCluster(t)
	case stream && kill:
		s.rabbit = testenv.StartRabbitStream(t)
	case stream:
		s.rabbit = testenv.SharedRabbitStream(t)
	case kill:
		s.rabbit = testenv.StartRabbit(t)
		testenv.RequireOwn(t, s.rabbit)
	default:
		s.rabbit = testenv.SharedRabbit(t)
	}
	if s.cluster != nil {
		s.rabbit = s.cluster.Node(0)
	}
}

// world creates the database, the legacy table of a mapped source, runs `walbox migrate` (with
// two shards) and declares the exchange and queue.
func (s *seamRun) world() {
	t, c := s.t, s.c
	db := s.pg.NewDatabase(t)
	w := &world{t: t, pg: s.pg, rabbit: s.rabbit, db: db, relayDB: db, relayMQ: s.rabbit.URL(),
		slot: testenv.UniqueName("slot"), exchange: testenv.UniqueName("ex"), queue: testenv.UniqueName("q"), binding: "#"}
	w.conn = s.pg.Conn(t, db)
	s.w = w
	if s.cluster != nil {
		w.queueArgs = amqp.Table{"x-queue-type": "quorum"}
		w.relayMQ = strings.Join(s.cluster.URLs(), ",")
	}
	if s.standby != nil {
		w.relayDB = bothHosts(t, db, s.standby.Port())
	}
	if c.is("source", "mapped") || c.is("source", "position") {
		s.pg.Exec(t, db, legacyDDL)
		ids := "column"
		if c.is("source", "position") {
			ids = "position"
		}
		path := filepath.Join(t.TempDir(), "walbox.yaml")
		if err := os.WriteFile(path, fmt.Appendf(nil, legacyConfig, ids), 0o600); err != nil {
			t.Fatal(err)
		}
		s.env = append(s.env, "WALBOX_CONFIG="+path)
		s.table = outbox.Table{Schema: "public", Name: "legacy_events"}
		s.columns = []string{"event_id", "entity", "aggregate_id", "kind", "body"}
	}
	if c.is("publisher", "stream") {
		s.stream = testenv.UniqueName("events")
		var urls []string
		if s.cluster != nil {
			for _, node := range s.cluster.Nodes() {
				urls = append(urls, node.StreamURL())
			}
		} else {
			urls = []string{s.rabbit.StreamURL()}
		}
		s.env = append(s.env, "WALBOX_STREAM_URL="+strings.Join(urls, ","), "WALBOX_STREAM="+s.stream, "WALBOX_STREAM_MAX_AGE=24h")
	}
	if c.is("slots", "lanes") {
		s.env = append(s.env, "WALBOX_LANES=3")
	}
	args := []string{"migrate"}
	if c.is("slots", "shards") {
		s.shards = 2
		args = append(args, "--shards", "2")
	}
	if r, _ := s.refused(); r.cmd == "migrate" {
		return // the refusal cell runs it
	}
	if out, code := w.walbox(s.env, args...); code != 0 {
		t.Fatalf("walbox %s exited %d:\n%s", strings.Join(args, " "), code, out)
	}
	if s.table != outbox.DefaultTable && s.shards == 0 {
		s.pg.Exec(t, db, "ALTER PUBLICATION walbox ADD TABLE "+legacyTable)
	}
	if !c.is("publisher", "stream") {
		w.declare()
	}
}

// refused returns the refusal the cell holds, if any.
func (s *seamRun) refused() (refusal, bool) {
	refused, err := refusedPairs(seamDimensions, seamRefusals)
	if err != nil {
		s.t.Fatal(err)
	}
	return s.c.refusedIn(refused)
}

// set is the cell's set of shards (N 0: the single slot).
func (s *seamRun) set(n int) shard.Set {
	return shard.Set{Slot: s.w.slot, Publication: "walbox", N: n}
}

// refusal runs the command that must refuse the cell's pair and checks its exit code and its
// one line.
func (s *seamRun) refusal(r refusal) {
	t := s.t
	var out string
	var code int
	switch r.cmd {
	case "migrate":
		out, code = s.w.walbox(s.env, "migrate", "--shards", "2")
	case "run":
		p := s.w.startRelay(s.env...)
		code, out = p.Wait(2*time.Minute), p.Output()
	case "reshard":
		out, code = s.w.walbox(s.env, "reshard", "--shards", "2")
	case "recover":
		s.read()
		s.startRelays()
		s.startWriter("agg")
		s.progress(200, 2*time.Minute)
		s.killRelays()
		s.w.dropSlot()
		out, code = s.w.walbox(s.env, "recover")
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.Contains(l, r.msg) {
			lines = append(lines, l)
		}
	}
	t.Logf("SUMMARY %s refused=%s code=%d", t.Name(), r.cmd, code)
	soakCell(t.Name(), 0, 0, 0, 0)
	if code != r.code || len(lines) != 1 {
		t.Fatalf("walbox %s exited %d with %d lines saying %q; want exit %d and one such line:\n%s",
			r.cmd, code, len(lines), r.msg, r.code, testenv.Tail(out, 20))
	}
}

// read starts what reads the cell's messages: a verifier on the queue, or a reader of the stream.
func (s *seamRun) read() {
	if s.stream != "" {
		s.sr = readStream(s.t, s.streamURL(), s.stream)
		return
	}
	s.v = s.w.startVerifier()
}

// streamURL is the stream URL of the node the checker reads from.
func (s *seamRun) streamURL() string { return s.rabbit.StreamURL() }

// count is how many messages arrived so far.
func (s *seamRun) count() int {
	if s.sr != nil {
		return s.sr.count()
	}
	return s.v.Count()
}

// progress waits for the writer to commit n more rows, then for n more messages.
func (s *seamRun) progress(n int, timeout time.Duration) {
	s.t.Helper()
	wr := s.writers[len(s.writers)-1]
	rows := wr.Stats().Rows + n
	waitFor(s.t, timeout, fmt.Sprintf("%d rows committed", rows), func() bool { return wr.Stats().Rows >= rows })
	want := s.count() + n
	waitFor(s.t, timeout, fmt.Sprintf("%d messages", want), func() bool { return s.count() >= want })
}

// relayEnv is the settings of the relay of shard k of n (n 0: the single slot).
func (s *seamRun) relayEnv(k, n int) []string {
	env := slices.Clone(s.env)
	if n > 0 {
		env = append(env, "WALBOX_SHARDS="+itoa(n), "WALBOX_SHARD="+itoa(k))
	}
	return env
}

// startRelays starts a relay for each slot, and a standby beside it where the cell has them.
func (s *seamRun) startRelays() {
	for k := range max(s.shards, 1) {
		s.startSlot(k, s.shards)
	}
}

// startSlot starts the relay of shard k of n, and its standby.
func (s *seamRun) startSlot(k, n int) {
	r := s.w.startRelay(s.relayEnv(k, n)...)
	r.waitState("streaming", 2*time.Minute)
	s.relays[k] = append(s.relays[k], r)
	if s.c.is("relays", "standby") {
		sb := s.w.startRelay(s.relayEnv(k, n)...)
		sb.waitState("standby", 2*time.Minute)
		s.relays[k] = append(s.relays[k], sb)
	}
}

// killRelays kills every relay.
func (s *seamRun) killRelays() {
	for k, rs := range s.relays {
		for _, r := range rs {
			r.Kill()
		}
		delete(s.relays, k)
	}
}

// startWriter starts a writer named name on the cell's source.
func (s *seamRun) startWriter(name string) {
	cfg := checker.WriterConfig{Name: name, Seed: uint64(s.n)*1000 + uint64(len(s.writers)), Aggregates: 20, MaxTx: 20,
		Pause: 10 * time.Millisecond, Table: s.table, Columns: s.columns, Rollback: 0.05}
	if s.standby != nil {
		cfg.DatabaseURL = s.w.relayDB
	}
	if s.c.is("source", "emit") {
		cfg.Emit = 0.3
	}
	s.writers = append(s.writers, s.w.startWriter(cfg))
}

// fault injects the cell's fault while the writer commits.
func (s *seamRun) fault() {
	fault := seamDimensions[len(s.c)-1].values[s.c[len(s.c)-1]]
	switch fault {
	case "killpoint":
		s.killAtPoint()
	case "broker-kill":
		s.killBroker()
	case "pg-restart":
		s.pg.Stop(s.t, "fast")
		time.Sleep(time.Second) // the writer fails and retries meanwhile
		s.pg.Start(s.t)
	case "failover":
		s.failover()
	case "slot-lost":
		s.slotLost()
	case "prune-outage":
		s.pruneDuringOutage()
	case "reshard":
		s.reshard()
	case "restore":
		s.restore()
	default:
		s.t.Fatalf("the matrix has no way to inject the fault %q", fault)
	}
}

// seamKillPoints are the relay's kill points the cells kill at, one a cell in turn: those a
// streaming relay under a steady writer hits in every mode.
var seamKillPoints = []string{"begin", "row.next", "publish.sent", "confirm.acked", "report.recorded", "report.sent"}

// killAtPoint replaces the relay of the first slot by one built with kill points, armed at the
// cell's point; its standby, if any, waits beside it and takes over.
func (s *seamRun) killAtPoint() {
	t := s.t
	point := seamKillPoints[s.n%len(seamKillPoints)]
	for _, r := range s.relays[0] {
		r.Kill()
	}
	delete(s.relays, 0)
	cmd := exec.Command(killBin(t), "run")
	addr := testenv.FreeAddr(t)
	cmd.Env = s.w.env(append(s.relayEnv(0, s.shards), "WALBOX_LISTEN="+addr, killpoint.Env+"="+point+":"+itoa(killAt)))
	armed := &relay{Program: testenv.Start(t, cmd), t: t, addr: addr}
	s.w.checkKilled(point, killAt, armed.Wait(2*time.Minute), armed.Output())
	soakKill(point)
	t.Logf("killed at %s after %d messages", point, s.count())
	s.startSlot(0, s.shards)
}

// killBroker kills the broker, or the cluster node the first relay publishes to (another than
// the checker's if it can), and starts it again.
func (s *seamRun) killBroker() {
	t := s.t
	node := s.rabbit
	if s.cluster != nil {
		node = s.publishingNode()
	}
	if s.sr != nil {
		// A stream killed within seconds of its declaration stays unavailable after the node is back
		// ("Internal Error"): give it time to settle, as it has in production.
		time.Sleep(10 * time.Second)
	}
	node.Kill(t)
	time.Sleep(2 * time.Second) // the writer goes on committing
	node.Start(t)
	if s.sr != nil && s.cluster == nil {
		// The stream's node may take a while on a loaded machine.
		s.sr.close()
		waitFor(t, 3*time.Minute, "the stream reader to reconnect", func() bool { return s.sr.start() == nil })
	}
}

// publishingNode is the node of the cluster the first slot's active relay publishes to.
func (s *seamRun) publishingNode() *testenv.Rabbit {
	host := connectedTo(s.t, s.relays[0][0])
	for _, node := range s.cluster.Nodes() {
		if hostOf(s.t, node.URL()) == host || s.sr != nil && hostOf(s.t, node.StreamURL()) == host {
			return node
		}
	}
	s.t.Fatalf("the relay publishes to %s, no node of the cluster", host)
	return nil
}

// failover stops the writer, waits for the standby to replay all of it (so that no committed row
// is lost with the primary, which walbox could not help), kills the primary under the streaming
// relays, promotes the standby and writes on to it.
func (s *seamRun) failover() {
	t := s.t
	standbyDB := withHost(t, s.w.db, hostOf(t, s.standby.URL()))
	var slots []string
	for k := range max(s.shards, 1) {
		if s.shards == 0 {
			slots = append(slots, s.w.slot)
		} else {
			slots = append(slots, s.set(s.shards).SlotName(k))
		}
	}
	waitFor(t, 2*time.Minute, "the standby to synchronise the slots", func() bool {
		var n int
		err := execRow(t, standbyDB, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = ANY($1) AND synced AND NOT temporary", &n, slots)
		return err == nil && n == len(slots)
	})
	s.writers[len(s.writers)-1].stop()
	var lsn string
	if err := execRow(t, s.w.db, "SELECT pg_current_wal_lsn()::text", &lsn); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the standby to replay the primary's WAL", func() bool {
		var ok bool
		err := execRow(t, standbyDB, "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", &ok, lsn)
		return err == nil && ok
	})
	s.pg.Stop(t, "immediate")
	s.standby.Promote(t)
	s.startWriter("after")
}

// slotLost kills the relays, drops the slots, and runs `walbox recover` for each before
// starting the relays again.
func (s *seamRun) slotLost() {
	t := s.t
	s.killRelays()
	time.Sleep(500 * time.Millisecond) // a gap of rows the relays did not see
	for k := range max(s.shards, 1) {
		sw := s.w.in(t)
		args := []string{"recover"}
		if s.shards > 0 {
			sw.slot = s.set(s.shards).SlotName(k)
			args = append(args, "--slot", sw.slot, "--publication", s.set(s.shards).PublicationName(k))
		}
		sw.dropSlot()
		out, code := s.w.walbox(s.env, args...)
		if code != 0 {
			t.Fatalf("walbox %s exited %d:\n%s", strings.Join(args, " "), code, out)
		}
		t.Logf("walbox %s:\n%s", strings.Join(args, " "), testenv.Tail(out, 6))
		s.recoverWarned = s.recoverWarned || strings.Contains(out, "cannot be republished and are lost")
	}
	s.startRelays()
}

// pruneDuringOutage kills the relays, lets rows age past prune's cutoff unrelayed, runs `walbox
// prune`, which must keep them, and starts the relays again.
func (s *seamRun) pruneDuringOutage() {
	t := s.t
	time.Sleep(1500 * time.Millisecond) // relayed rows older than the cutoff, which prune may delete
	s.killRelays()
	time.Sleep(1500 * time.Millisecond) // unrelayed rows older than the cutoff, which it must keep
	out, code := s.w.walbox(s.env, "prune", "--older-than", "1s")
	if code != 0 {
		t.Fatalf("walbox prune exited %d:\n%s", code, out)
	}
	t.Logf("walbox prune:\n%s", testenv.Tail(out, 4))
	s.startRelays()
}

// reshard moves to one shard more under load: the new set's relays start once the old slots
// passed the cut, then the old relays stop and the old set is retired.
func (s *seamRun) reshard() {
	t := s.t
	to := max(s.shards, 1) + 1
	out, code := s.w.walbox(s.env, "reshard", "--shards", itoa(to), "--wait", "2m")
	if code != 0 {
		t.Fatalf("walbox reshard --shards %d --wait 2m exited %d:\n%s", to, code, out)
	}
	old := s.relays
	s.relays = map[int][]*relay{}
	s.shards = to
	s.startRelays()
	for _, rs := range old {
		for _, r := range rs {
			r.Kill()
		}
	}
	out, code = s.w.walbox(s.env, "reshard", "--shards", itoa(to), "--retire")
	if code != 0 {
		t.Fatalf("walbox reshard --shards %d --retire exited %d:\n%s", to, code, out)
	}
}

// restore stops the writer and the relays once everything is delivered, and copies the data
// directory. Then rows are written and relayed, and the copy goes back in place: those rows are
// gone from the server, not from the broker. Then the writer and the relays start again on the
// restored server, at the older WAL position.
func (s *seamRun) restore() {
	t := s.t
	quiesce := func() {
		t.Helper()
		s.writers[len(s.writers)-1].stop()
		var committed []checker.Row
		for _, wr := range s.writers {
			committed = append(committed, wr.Committed()...)
		}
		waitFor(t, 3*time.Minute, "every committed row delivered", func() bool { return s.deliveredAll(committed) })
		time.Sleep(time.Second) // the slot catches up with the confirms
		for k, rs := range s.relays {
			for _, r := range rs {
				if code := r.Stop(time.Minute); code != 0 {
					t.Fatalf("walbox run exited %d:\n%s", code, testenv.Tail(r.Output(), 20))
				}
			}
			delete(s.relays, k)
		}
	}
	quiesce()
	s.restoreAt = len(s.writers)
	restoreFault(t, s.pg, func() {
		s.startRelays()
		s.startWriter("between")
		s.progress(200, 2*time.Minute)
		quiesce()
	})
	s.startWriter("after")
	for k := range max(s.shards, 1) {
		s.relays[k] = append(s.relays[k], s.w.startRelay(s.relayEnv(k, s.shards)...))
	}
}

// deliveredAll reports whether every row of committed arrived.
func (s *seamRun) deliveredAll(committed []checker.Row) bool {
	if s.sr != nil {
		return len(notInStream(s.sr, committed)) == 0
	}
	return delivered(bodyKeys(committed, false), s.v.Deliveries())
}

// stoppedOnRestore reports whether a relay stopped on the restored server, naming it in one
// line: the promise then holds for the rows before the restore. It fails the test if a relay
// stopped otherwise.
func (s *seamRun) stoppedOnRestore() bool {
	t := s.t
	wr := s.writers[len(s.writers)-1]
	waitFor(t, time.Minute, "200 rows committed after the restore", func() bool { return wr.Stats().Rows >= 200 })
	var all []checker.Row
	for _, wr := range s.writers {
		all = append(all, wr.Committed()...)
	}
	var stopped *relay
	waitFor(t, 3*time.Minute, "every row delivered, or a relay stopped", func() bool {
		for _, rs := range s.relays {
			for _, r := range rs {
				if r.Exited() {
					stopped = r
					return true
				}
			}
		}
		return s.deliveredAll(all)
	})
	if stopped == nil {
		return false
	}
	out := stopped.Output()
	if !strings.Contains(out, "restored") || !strings.Contains(lastLine(out, "walbox run:"), "restored") {
		t.Fatalf("walbox run stopped on the restored server without one line naming the restore:\n%s", testenv.Tail(out, 20))
	}
	t.Logf("walbox run stopped on the restored server: %s", lastLine(out, "walbox run:"))
	return true
}

// verdict stops the writers and checks what the cell promises.
func (s *seamRun) verdict() {
	t := s.t
	writers := s.writers
	if s.c.is("fault", "restore") && s.stoppedOnRestore() {
		writers = s.writers[:s.restoreAt+1] // the rows before the restore
		for _, wr := range s.writers[s.restoreAt+1:] {
			wr.stop()
		}
	}
	var committed []checker.Row
	var st checker.WriterStats
	for _, wr := range writers {
		wr.stop()
		if err := wr.Flush(t.Context()); err != nil {
			t.Errorf("writer: %v", err)
		}
		committed = append(committed, wr.Committed()...)
		ws := wr.Stats()
		st.Unresolved += ws.Unresolved
		st.Unknown += ws.Unknown
	}
	if len(committed) == 0 {
		t.Fatal("the writers committed nothing: the cell proved nothing")
	}
	var deliveries []checker.Delivery
	if s.sr != nil {
		s.sr.wait(t, len(committed), 3*time.Minute)
		time.Sleep(3 * time.Second) // anything stored twice would be there by now
		for _, m := range s.sr.messages() {
			deliveries = append(deliveries, checker.Parse(fmt.Sprint(m.Properties.MessageID), m.GetData()))
		}
	} else {
		keys := bodyKeys(committed, s.c.is("source", "emit") && s.c.is("fault", "slot-lost"))
		deadline := time.Now().Add(3 * time.Minute)
		for !delivered(keys, s.v.Deliveries()) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(2 * time.Second) // late duplicates, phantoms and emitted messages after the last row
		deliveries = s.v.Deliveries()
	}
	if s.c.is("source", "position") {
		committed = positionIDs(committed, deliveries)
		if shared := sharedIDs(committed); len(shared) > 0 {
			t.Errorf("%d message ids name two committed rows each, so a consumer deduplicating by id drops one (e.g. %s)",
				len(shared), shared[0])
		}
	}
	if s.c.is("source", "emit") && s.c.is("fault", "slot-lost") {
		committed = s.withoutTheGapsEmitted(committed, deliveries)
	}
	rep := checker.Check(committed, deliveries)
	rep.Unresolved = st.Unresolved
	t.Logf("SUMMARY %s %s unknown_commits=%d", t.Name(), rep, st.Unknown)
	soakReport(t.Name(), rep)
	if err := rep.Err(); err != nil {
		t.Errorf("%v\n%s%s", err, rep, s.streamContext(rep))
	}
	if s.sr != nil && !s.c.is("fault", "reshard") && rep.Duplicated != 0 {
		t.Errorf("%d messages stored more than once in the stream", rep.Duplicated)
	}
}

// bodyKeys are the committed rows by aggregate and seq, which the body carries, without the
// emitted ones if rowsOnly.
func bodyKeys(rows []checker.Row, rowsOnly bool) map[string]bool {
	keys := make(map[string]bool, len(rows))
	for _, r := range rows {
		if !rowsOnly || !r.Emitted {
			keys[r.Aggregate+"/"+itoa(int(r.Seq))] = true
		}
	}
	return keys
}

// delivered reports whether every row of keys was delivered.
func delivered(keys map[string]bool, deliveries []checker.Delivery) bool {
	got := make(map[string]bool, len(deliveries))
	for _, d := range deliveries {
		got[d.Aggregate+"/"+itoa(int(d.Seq))] = true
	}
	for k := range keys {
		if !got[k] {
			return false
		}
	}
	return true
}

// positionIDs gives each committed row the message id of its first delivery, found by the body:
// walbox derives position ids from the commit, which the writer does not know. A row sent again
// under another id then counts as a phantom, which is what it is to a consumer.
func positionIDs(committed []checker.Row, deliveries []checker.Delivery) []checker.Row {
	first := map[string]string{}
	for _, d := range deliveries {
		k := d.Aggregate + "/" + itoa(int(d.Seq))
		if _, ok := first[k]; !ok && !d.Malformed {
			first[k] = d.ID
		}
	}
	out := slices.Clone(committed)
	for i, r := range out {
		if id, ok := first[r.Aggregate+"/"+itoa(int(r.Seq))]; ok {
			out[i].ID = id
		}
	}
	return out
}

// withoutTheGapsEmitted drops from committed the emitted messages a lost slot took with it:
// they have no row, so recover cannot republish them, and says so (docs/operations.md). It fails
// the test if recover did not say it, or if a row of the table is among them.
func (s *seamRun) withoutTheGapsEmitted(committed []checker.Row, deliveries []checker.Delivery) []checker.Row {
	got := map[string]bool{}
	for _, d := range deliveries {
		got[d.ID] = true
	}
	var kept []checker.Row
	gone := 0
	for _, r := range committed {
		if r.Emitted && !got[r.ID] {
			gone++
			continue
		}
		kept = append(kept, r)
	}
	s.t.Logf("%d emitted messages of the gap lost with the slot, as recover warned", gone)
	if gone > 0 && !s.recoverWarned {
		s.t.Errorf("%d emitted messages lost with the slot, and recover did not warn of it", gone)
	}
	return kept
}

// streamContext describes, for a failure, the stream's messages around each order violation:
// which producer stored each, under which publishing id and position.
func (s *seamRun) streamContext(rep checker.Report) string {
	if s.sr == nil || len(rep.Violations) == 0 {
		return ""
	}
	msgs := s.sr.messages()
	var b strings.Builder
	for _, v := range rep.Violations {
		for i := max(v.Index-3, 0); i < min(v.Index+2, len(msgs)); i++ {
			m := msgs[i]
			d := checker.Parse(fmt.Sprint(m.Properties.MessageID), m.GetData())
			fmt.Fprintf(&b, "offset-order %d: %s seq %d producer=%v publishing_id=%v position=%v\n", i, d.Aggregate, d.Seq,
				m.ApplicationProperties["walbox-producer"], m.ApplicationProperties["walbox-publishing-id"], m.ApplicationProperties["walbox-position"])
		}
	}
	return b.String()
}

// sharedIDs returns the message ids that more than one committed row was delivered under.
func sharedIDs(committed []checker.Row) []string {
	rows := map[string]int{}
	var shared []string
	for _, r := range committed {
		rows[r.ID]++
		if rows[r.ID] == 2 {
			shared = append(shared, r.ID)
		}
	}
	return shared
}
