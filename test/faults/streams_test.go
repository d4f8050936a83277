package faults_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/internal/streamconn"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/test/checker"
)

// Publishing into a stream, walbox is SIGKILLed again and again while transactions commit (some
// rolled back, some rows emitted without a table), the broker is killed once, a relay is stopped
// with SIGSTOP until a standby takes over and then resumes, and a standby takes over from a
// killed relay. Read from its first offset, the stream then holds every committed row exactly
// once, in commit order, and nothing rolled back.
func TestStreamExactlyOnceAcrossKills(t *testing.T) {
	heavy(t)
	const kills = 8
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	pg := testenv.StartPostgres(t, testenv.WithSetting("wal_sender_timeout", "3s"))
	testenv.RequireOwn(t, pg)
	rabbit := testenv.StartRabbitStream(t)
	w := newWorld(t, pg, rabbit)
	name := testenv.UniqueName("events")
	env := []string{"WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name, "WALBOX_STREAM_MAX_AGE=24h"}
	sr := readStream(t, rabbit.StreamURL(), name)
	wr := w.startWriter(checker.WriterConfig{Seed: seed, MaxTx: 40, Pause: 10 * time.Millisecond, Rollback: 0.1, Emit: 0.2})

	// 1. SIGKILL at random moments.
	for i := range kills {
		r := w.startRelay(env...)
		time.Sleep(time.Duration(rng.Int64N(int64(1500 * time.Millisecond))))
		r.Kill()
		t.Logf("kill %d: %d rows committed, %d in the stream", i+1, wr.Stats().Rows, sr.count())
	}

	// 2. The broker killed under a streaming relay, and started again.
	active := w.startRelay(env...)
	active.waitState("streaming", time.Minute)
	sr.progress(t, 200, time.Minute)
	t.Logf("%s: broker killed with %d messages in the stream", time.Now().Format(time.StampMilli), sr.count())
	rabbit.Kill(t)
	time.Sleep(2 * time.Second)
	rabbit.Start(t)
	t.Logf("%s: broker started", time.Now().Format(time.StampMilli))
	sr.restart(t)
	active.waitState("streaming", time.Minute)
	sr.progress(t, 200, 2*time.Minute)

	// 3. The active relay stopped: a standby takes over once the server drops the stopped one's
	// connection; the stopped one then resumes with whatever it had not sent.
	standby := w.startRelay(env...)
	standby.waitState("standby", time.Minute)
	active.Signal(syscall.SIGSTOP)
	standby.waitState("streaming", time.Minute)
	sr.progress(t, 200, time.Minute)
	active.Signal(syscall.SIGCONT)
	time.Sleep(2 * time.Second)

	// 4. A standby takes over from a killed relay.
	backup := w.startRelay(env...)
	standby.Kill()
	sr.progress(t, 200, 2*time.Minute)
	wr.stop()
	if err := wr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	_ = backup
	committed := wr.Committed()
	sr.wait(t, len(committed), 3*time.Minute)
	time.Sleep(3 * time.Second) // anything stored twice would be there by now
	checkStream(t, committed, sr.messages(), wr.Stats())
}

// checkStream holds the stream against the committed rows: each once, in commit order.
func checkStream(t *testing.T, committed []checker.Row, msgs []*amqp.Message, st checker.WriterStats) {
	t.Helper()
	var deliveries []checker.Delivery
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = fmt.Sprint(m.Properties.MessageID)
		deliveries = append(deliveries, checker.Parse(ids[i], m.GetData()))
	}
	rep := checker.Check(committed, deliveries)
	rep.Unresolved = st.Unresolved
	t.Logf("SUMMARY %s %s rolled_back=%d emitted_share=0.2", t.Name(), rep, st.RolledBack)
	soakReport(t.Name(), rep)
	if err := rep.Err(); err != nil {
		t.Errorf("%v\n%s", err, rep)
	}
	if rep.Duplicated != 0 {
		t.Errorf("%d messages stored more than once", rep.Duplicated)
	}
	want := make([]string, len(committed))
	for i, r := range committed {
		want[i] = r.ID
	}
	if st.Unknown == 0 && !slices.Equal(ids, want) {
		i := 0
		for i < min(len(ids), len(want)) && ids[i] == want[i] {
			i++
		}
		t.Errorf("the stream is not in commit order: first difference at message %d of %d (%d committed)", i, len(ids), len(want))
	}
	if len(committed) == 0 || st.RolledBack == 0 {
		t.Errorf("the writer committed %d rows and rolled back %d transactions: the test proved little", len(committed), st.RolledBack)
	}
}

// streamReader consumes a stream from its first offset, for the whole test.
type streamReader struct {
	uri, name string
	env       *stream.Environment
	mu        sync.Mutex
	msgs      []*amqp.Message
	// next is the offset after the last message kept: some offsets hold no message (a named
	// producer's state at each segment's start).
	next int64
}

// readStream starts reading the stream name, waiting for the stream to be declared.
func readStream(t *testing.T, uri, name string) *streamReader {
	sr := &streamReader{uri: uri, name: name}
	t.Cleanup(sr.close)
	go func() {
		// The relay declares the stream; the reader starts once it exists.
		for range 600 {
			if err := sr.start(); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return sr
}

func (sr *streamReader) start() error {
	env, err := stream.NewEnvironment(streamconn.Options().SetUri(sr.uri))
	if err != nil {
		return err
	}
	sr.mu.Lock()
	from := sr.next
	sr.mu.Unlock()
	_, err = env.NewConsumer(sr.name, func(ctx stream.ConsumerContext, m *amqp.Message) {
		sr.mu.Lock()
		defer sr.mu.Unlock()
		if o := ctx.Consumer.GetOffset(); o >= sr.next {
			sr.msgs, sr.next = append(sr.msgs, m), o+1
		}
	}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.Offset(from)))
	if err != nil {
		_ = env.Close()
		return err
	}
	sr.mu.Lock()
	sr.env = env
	sr.mu.Unlock()
	return nil
}

// restart reads on after the broker was restarted.
func (sr *streamReader) restart(t *testing.T) {
	t.Helper()
	sr.close()
	waitFor(t, time.Minute, "the stream reader to reconnect", func() bool { return sr.start() == nil })
}

func (sr *streamReader) close() {
	sr.mu.Lock()
	env := sr.env
	sr.env = nil
	sr.mu.Unlock()
	if env != nil {
		_ = env.Close()
	}
}

func (sr *streamReader) count() int {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	return len(sr.msgs)
}

func (sr *streamReader) messages() []*amqp.Message {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	return slices.Clone(sr.msgs)
}

// progress waits until n more messages than now are in the stream.
func (sr *streamReader) progress(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	sr.wait(t, sr.count()+n, timeout)
}

func (sr *streamReader) wait(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("%d messages in the stream", n), func() bool { return sr.count() >= n })
}

// settle waits until the reader holds every message the stream holds now, and returns their count.
// The reader reads behind the relays, so a count alone may still grow with no new write.
func (sr *streamReader) settle(t *testing.T) int {
	t.Helper()
	end := streamEnd(t, sr.uri, sr.name)
	waitFor(t, 2*time.Minute, fmt.Sprintf("the reader at the stream's end (offset %d)", end), func() bool {
		sr.mu.Lock()
		defer sr.mu.Unlock()
		return sr.next >= end
	})
	return sr.count()
}

// streamEnd returns the offset after the last message of the stream's last chunk.
func streamEnd(t *testing.T, uri, name string) int64 {
	t.Helper()
	env, err := stream.NewEnvironment(streamconn.Options().SetUri(uri))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	end := make(chan int64, 1)
	var seen int // only the client's dispatch goroutine touches it
	c, err := env.NewConsumer(name, func(cc stream.ConsumerContext, _ *amqp.Message) {
		if seen++; seen == int(cc.GetEntriesCount()) {
			select {
			case end <- cc.Consumer.GetOffset() + 1:
			default:
			}
		}
	}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.Last()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case e := <-end:
		return e
	case <-time.After(time.Minute):
		t.Fatalf("read no last chunk of %s in a minute", name)
		return 0
	}
}

// Two PostgreSQL clusters, each with walbox on the default slot name, publish into one stream
// while their writers commit, and each relay is killed once. Each relay's producer has a name of
// its own (system, database, slot), so the broker drops nothing of either: the stream holds every
// committed row of both databases exactly once, each database's in its commit order. Under one
// name for both (walbox-walbox, before), 1,114 of 1,824 rows were never stored.
func TestStreamTwoClustersWithTheDefaultSlotName(t *testing.T) {
	heavy(t)
	rabbit := testenv.SharedRabbitStream(t)
	name := testenv.UniqueName("events")
	env := []string{"WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name}
	sr := readStream(t, rabbit.StreamURL(), name)
	type cluster struct {
		w      *world
		wr     *writer
		r      *relay
		system string
	}
	var cs []*cluster
	for i := range 2 {
		pg := testenv.StartPostgres(t)
		c := &cluster{w: newWorldOn(t, pg, rabbit, "walbox", "#", nil)}
		if err := execRow(t, c.w.db, "SELECT system_identifier::text FROM pg_control_system()", &c.system); err != nil {
			t.Fatal(err)
		}
		c.wr = c.w.startWriter(checker.WriterConfig{Seed: uint64(time.Now().UnixNano()) + uint64(i), MaxTx: 20,
			Pause: 5 * time.Millisecond, Rollback: 0.1, Emit: 0.2})
		c.r = c.w.startRelay(env...)
		cs = append(cs, c)
	}
	sr.progress(t, 600, 2*time.Minute)
	for _, c := range cs {
		c.r.Kill()
		c.r = c.w.startRelay(env...)
	}
	sr.progress(t, 600, 2*time.Minute)
	total := 0
	for _, c := range cs {
		c.wr.stop()
		if err := c.wr.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		total += len(c.wr.Committed())
	}
	sr.wait(t, total, 3*time.Minute)
	time.Sleep(3 * time.Second) // anything stored twice would be there by now
	for _, c := range cs {
		var of []*amqp.Message
		for _, m := range sr.messages() {
			if m.ApplicationProperties["walbox-system"] == c.system {
				of = append(of, m)
			}
		}
		t.Logf("system %s: %d rows committed, %d messages in the stream", c.system, len(c.wr.Committed()), len(of))
		checkStream(t, c.wr.Committed(), of, c.wr.Stats())
	}
	if n := sr.count(); n != total {
		t.Errorf("%d messages in the stream, want the %d rows committed", n, total)
	}
}

// A relay stopped (SIGSTOP) in the middle of a backlog, until the server drops its connection
// and another relay takes the slot, must write nothing it held when it resumes: in a failover
// those rows may be only the old primary's, and their ids the new relay's. Here the backlog is
// messages of walbox_emit, which the relay that takes over does not relay (message prefix none):
// it stores nothing, so the broker would store whatever the resumed relay wrote. The stream
// gains nothing once it resumes: the relay finds that it sent no status update for longer than
// the server waits for one, and writes nothing more.
func TestStreamRelayResumedAfterTakeoverWritesNothing(t *testing.T) {
	heavy(t)
	pg := testenv.StartPostgres(t, testenv.WithSetting("wal_sender_timeout", "2s"))
	testenv.RequireOwn(t, pg)
	rabbit := testenv.SharedRabbitStream(t)
	w := newWorld(t, pg, rabbit)
	name := testenv.UniqueName("events")
	env := []string{"WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name}
	sr := readStream(t, rabbit.StreamURL(), name)
	emitted := w.newWriter(checker.WriterConfig{Seed: 36, Emit: 1})
	const backlog = 40_000
	for range backlog / 1000 {
		if err := emitted.Tx(t.Context(), 1000); err != nil {
			t.Fatal(err)
		}
	}
	// A silence bound far above the stop: the relay's check of the server's silence, which may
	// or may not win the race at the resume, is out of the way.
	old := w.startRelay(append(env, "WALBOX_SERVER_TIMEOUT=5m")...)
	sr.wait(t, 2000, 2*time.Minute)
	old.Signal(syscall.SIGSTOP)
	waitFor(t, time.Minute, "the server to drop the stopped relay", func() bool {
		var active bool
		err := execRow(t, w.db, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", &active, w.slot)
		return err == nil && !active
	})
	taker := w.startRelay(append(env, "WALBOX_MESSAGE_PREFIX=none")...)
	taker.waitState("streaming", time.Minute)
	time.Sleep(2 * time.Second) // the taker relays none of the backlog
	before := sr.settle(t)

	old.Signal(syscall.SIGCONT)
	waitFor(t, time.Minute, "the resumed relay to wait as a standby", func() bool { return old.state() == "standby" })
	time.Sleep(3 * time.Second) // anything it wrote would be in the stream by now
	if after := sr.settle(t); after != before {
		t.Errorf("the stream went from %d to %d messages once the stopped relay resumed: it wrote what it held\n%s", before, after, old.Output())
	}
	if before >= backlog {
		t.Errorf("the relay stored the whole backlog before it was stopped: the test proved nothing")
	}
}

// The same stop, where only the replication connection has a short wal_sender_timeout: the
// walsender drops the stopped relay after its own timeout, not the one the SQL connection reads
// (with --replication-url the walsender runs on another server; here the replication URL sets
// its own). Bound to three quarters of the SQL connection's 10 minutes, the resumed relay took
// itself for the slot's holder and wrote what it held.
func TestStreamRelayResumedWritesNothingUnderTheWalsendersTimeout(t *testing.T) {
	heavy(t)
	pg := testenv.StartPostgres(t, testenv.WithSetting("wal_sender_timeout", "10min"))
	testenv.RequireOwn(t, pg)
	rabbit := testenv.SharedRabbitStream(t)
	w := newWorld(t, pg, rabbit)
	name := testenv.UniqueName("events")
	sep := "?"
	if strings.Contains(w.relayDB, "?") {
		sep = "&"
	}
	replURL := w.relayDB + sep + "options=-c%20wal_sender_timeout%3D2s"
	env := []string{"WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name}
	sr := readStream(t, rabbit.StreamURL(), name)
	emitted := w.newWriter(checker.WriterConfig{Seed: 39, Emit: 1})
	const backlog = 40_000
	for range backlog / 1000 {
		if err := emitted.Tx(t.Context(), 1000); err != nil {
			t.Fatal(err)
		}
	}
	old := w.startRelay(append(env, "WALBOX_SERVER_TIMEOUT=5m", "WALBOX_REPLICATION_URL="+replURL)...)
	sr.wait(t, 2000, 2*time.Minute)
	old.Signal(syscall.SIGSTOP)
	waitFor(t, time.Minute, "the server to drop the stopped relay", func() bool {
		var active bool
		err := execRow(t, w.db, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", &active, w.slot)
		return err == nil && !active
	})
	taker := w.startRelay(append(env, "WALBOX_MESSAGE_PREFIX=none")...)
	taker.waitState("streaming", time.Minute)
	time.Sleep(2 * time.Second) // the taker relays none of the backlog
	before := sr.settle(t)

	old.Signal(syscall.SIGCONT)
	waitFor(t, time.Minute, "the resumed relay to wait as a standby", func() bool { return old.state() == "standby" })
	time.Sleep(3 * time.Second) // anything it wrote would be in the stream by now
	if after := sr.settle(t); after != before {
		t.Errorf("the stream went from %d to %d messages once the stopped relay resumed: it wrote what it held\n%s", before, after, old.Output())
	}
	if before >= backlog {
		t.Errorf("the relay stored the whole backlog before it was stopped: the test proved nothing")
	}
}

// The data directory is restored from a copy taken before the stream got its last rows. The
// restored server has the same system identifier and timeline, and its new rows take LSNs at or
// before the stream's last row: walbox would confirm them as stored without sending them. It
// stops instead, naming the cause and the way out, and the slot stays where it was.
func TestStreamRestoredDatabaseStopsTheRelay(t *testing.T) {
	heavy(t)
	pg := testenv.StartPostgres(t)
	testenv.RequireOwn(t, pg)
	rabbit := testenv.SharedRabbitStream(t)
	w := newWorld(t, pg, rabbit)
	name := testenv.UniqueName("events")
	env := []string{"WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name}
	sr := readStream(t, rabbit.StreamURL(), name)
	write := func(seed uint64, txs int) {
		t.Helper()
		wr := w.newWriter(checker.WriterConfig{Seed: seed})
		for range txs {
			if err := wr.Tx(t.Context(), 5); err != nil {
				t.Fatal(err)
			}
		}
		wr.Close()
	}
	relayAll := func(n int) {
		t.Helper()
		r := w.startRelay(env...)
		sr.wait(t, n, 2*time.Minute)
		time.Sleep(time.Second) // the slot catches up with the confirms
		if code := r.Stop(time.Minute); code != 0 {
			t.Fatalf("walbox run exited %d:\n%s", code, r.Output())
		}
	}
	write(41, 20)
	relayAll(100)
	restoreFault(t, pg, func() {
		write(42, 20)
		relayAll(200)
	})
	write(43, 10) // new rows, at LSNs the stream's last rows had
	var before string
	if err := execRow(t, w.db, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", &before, w.slot); err != nil {
		t.Fatal(err)
	}

	r := w.startRelay(env...)
	code := r.Wait(2 * time.Minute)
	out := r.Output()
	if code == 0 || !strings.Contains(out, "WAL does not have") || !strings.Contains(out, "restored") {
		t.Errorf("walbox run exited %d; want a stop naming the restored data directory:\n%s", code, out)
	}
	var after string
	if err := execRow(t, w.db, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", &after, w.slot); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("the slot moved from %s to %s: rows of the restored server were confirmed unsent", before, after)
	}
	if n := sr.count(); n != 200 {
		t.Errorf("%d messages in the stream, want the 200 relayed before the restore", n)
	}
}

// A relay is killed in the middle of one large transaction of rows and walbox_emit messages, so
// that the stream holds part of it. The relay that goes on relays no messages (message prefix
// none): a row's index still counts the transaction's messages, so it skips exactly the rows
// stored and stores the rest. Without the messages in the index, the rows the first relay had
// not stored took the indexes of rows it had, and were lost.
func TestStreamPrefixChangedInsideATransactionLosesNoRow(t *testing.T) {
	heavy(t)
	pg := testenv.StartPostgres(t)
	testenv.RequireOwn(t, pg)
	rabbit := testenv.SharedRabbitStream(t)
	w := newWorld(t, pg, rabbit)
	name := testenv.UniqueName("events")
	env := []string{"WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name}
	sr := readStream(t, rabbit.StreamURL(), name)
	wr := w.newWriter(checker.WriterConfig{Seed: 38, Emit: 0.5})
	const n = 30_000
	if err := wr.Tx(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	first := w.startRelay(env...)
	sr.wait(t, 1000, 2*time.Minute)
	first.Kill()
	stored := sr.count()
	t.Logf("killed with %d of the transaction's %d rows and messages in the stream", stored, n)
	if stored >= n {
		t.Fatal("the whole transaction was stored before the kill: the test proved nothing")
	}
	w.startRelay(append(env, "WALBOX_MESSAGE_PREFIX=none")...)
	var rows int
	for _, r := range wr.Committed() {
		if !r.Emitted {
			rows++
		}
	}
	seen := map[string]int{}
	var msgs []*amqp.Message
	waitFor(t, 3*time.Minute, "every row of the transaction in the stream", func() bool {
		msgs = sr.messages()
		clear(seen)
		for _, m := range msgs {
			seen[fmt.Sprint(m.Properties.MessageID)]++
		}
		for _, r := range wr.Committed() {
			if !r.Emitted && seen[r.ID] == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(3 * time.Second) // anything stored twice would be there by now
	msgs = sr.messages()
	clear(seen)
	for _, m := range msgs {
		seen[fmt.Sprint(m.Properties.MessageID)]++
	}
	for id, k := range seen {
		if k > 1 {
			t.Errorf("message %s stored %d times", id, k)
			break
		}
	}
	t.Logf("%d rows and %d messages in the transaction; %d stored", rows, n-rows, len(msgs))
}

// A relay killed inside one large transaction leaves part of it in the stream, and the slot before
// it. The next relay reads that part back from the stream at the first row it skips, while the slot
// streams. Race-built, reading tens of thousands of messages outlasts a wal_sender_timeout of 2 s.
// The relay's reporter sends status updates meanwhile, without moving the slot. So the walsender
// keeps the session: the server never drops it for silence, and the rest is stored, each row once.
// Without the updates, every session's read-back outlasts the timeout, and the server drops each.
//
// A relay starved past three quarters of the timeout ends its session itself (lapse.go), and
// reads back again. On busy cores that happened under a 1 s timeout (docs/bench/testtime.md). It
// is not what this test checks, so it counts the server's drops, not the relay's sessions.
func TestStreamReadBackLongerThanTheWalsendersTimeout(t *testing.T) {
	heavy(t)
	pg := testenv.StartPostgres(t, testenv.WithSetting("wal_sender_timeout", "2s"))
	testenv.RequireOwn(t, pg)
	rabbit := testenv.SharedRabbitStream(t)
	w := newWorld(t, pg, rabbit)
	name := testenv.UniqueName("events")
	env := []string{"WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name}
	sr := readStream(t, rabbit.StreamURL(), name)
	wr := w.newWriter(checker.WriterConfig{Seed: 53})
	const n = 100_000
	if err := wr.Tx(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	first := w.startRelay(env...)
	sr.wait(t, n/2, 3*time.Minute)
	first.Kill()
	stored := sr.settle(t)
	if stored >= n {
		t.Fatal("the whole transaction was stored before the kill: the test proved nothing")
	}
	// The server's drops count from here: the first relay, killed, is not what this test checks.
	logFrom := len(readFile(t, pg.LogFile()))
	second := w.startRelay(env...)
	began := time.Now()
	sr.wait(t, stored+1, 3*time.Minute)
	t.Logf("killed with %d of %d rows stored; the next relay stored its first row %v after its start",
		stored, n, time.Since(began).Round(time.Millisecond))
	sr.wait(t, n, 3*time.Minute)
	time.Sleep(2 * time.Second) // anything stored twice would be there by now
	seen := map[string]int{}
	for _, m := range sr.messages() {
		seen[fmt.Sprint(m.Properties.MessageID)]++
	}
	for _, row := range wr.Committed() {
		if seen[row.ID] != 1 {
			t.Errorf("row %s stored %d times", row.ID, seen[row.ID])
			break
		}
	}
	sessions := strings.Count(second.Output(), "msg=streaming")
	drops := strings.Count(readFile(t, pg.LogFile())[logFrom:], "terminating walsender process due to replication timeout")
	// Only the relay's own proof of starvation excuses a second session: its lapse, by the monotonic clock.
	var lapses int
	var others []string
	out := second.Output()
	for _, line := range strings.Split(out[max(strings.Index(out, "msg=streaming"), 0):], "\n") {
		switch {
		case !strings.Contains(line, "session ended; starting again from the slot"):
		case strings.Contains(line, "the process was stopped or starved"):
			lapses++
		default:
			others = append(others, line)
		}
	}
	switch {
	case drops != 0 || second.Exited():
		t.Errorf("the server dropped the relay for silence %d times (exited %t, %d sessions), want none: no status update went out during the read-back:\n%s",
			drops, second.Exited(), sessions, testenv.Tail(second.Output(), 30))
	case len(others) != 0 || sessions != lapses+1:
		t.Errorf("the relay started %d sessions, %d ended by a lapse; the others ended so: %q", sessions, lapses, others)
	case sessions > 1:
		t.Logf("the relay started %d sessions: starved past its lapse bound, it ended all but the last itself", sessions)
	}
}

// readFile returns the file's text.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A reshard from two shards to three, publishing into one stream under load. The new slots are
// created one after another, and the last one's consistent point is the cut: a new slot created
// earlier also holds rows committed before the cut, which the old shards deliver. The new
// relays skip them, so no row committed before the cut is stored twice. (Rows committed between
// the cut and the old relays' stop are stored by both sets: docs/streams.md lists it.)
func TestStreamReshardStoresNoRowBeforeTheCutTwice(t *testing.T) {
	heavy(t)
	rabbit := testenv.SharedRabbitStream(t)
	w := newShardedWorldOn(t, testenv.SharedPostgres(t), rabbit, 2)
	name := testenv.UniqueName("events")
	env := []string{"WALBOX_STREAM_URL=" + rabbit.StreamURL(), "WALBOX_STREAM=" + name}
	sr := readStream(t, rabbit.StreamURL(), name)
	wr := w.startWriter(checker.WriterConfig{Seed: 39, Aggregates: 40, MaxTx: 5, Pause: 5 * time.Millisecond})
	old := []*relay{w.startShard(0, 2, env...), w.startShard(1, 2, env...)}
	sr.progress(t, 300, 2*time.Minute)
	if out, code := w.walbox(nil, "reshard", "--shards", "3", "--wait", "90s"); code != 0 {
		t.Fatalf("walbox reshard --shards 3 exited %d:\n%s", code, out)
	}
	cut := w.cutOf(3)
	// Shard 0 of 3's slot is put back at its start below: then the peek replays its rows from
	// before the cut too, which the old set's relays stored.
	set3 := shard.Set{Slot: w.slot, Publication: "walbox", N: 3}
	kept := []string{set3.SlotName(0)}
	w.keepSlots(kept)
	var next []*relay
	for k := range 3 {
		next = append(next, w.startShard(k, 3, env...))
	}
	sr.progress(t, 300, 2*time.Minute)
	for _, r := range old {
		if code := r.Stop(30 * time.Second); code != 0 {
			t.Errorf("old relay exited %d", code)
		}
	}
	sr.progress(t, 200, 2*time.Minute)
	wr.stop()
	if err := wr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	sr.checkCut(t, wr.Committed(), cut)
	// stream_anchor peeks each shard's slot of both sets, each with its own producer, and finds
	// every row it checks in the stream: a reshard into a stream raises no false alarm.
	for _, r := range next {
		if code := r.Stop(30 * time.Second); code != 0 {
			t.Errorf("new relay exited %d", code)
		}
	}
	w.restoreSlots(kept)
	out, _ := w.walbox(env, "doctor")
	if n := strings.Count(out, "PASS  the stream's last row of slot"); n != 5 || strings.Contains(out, "WAL does not have") {
		t.Errorf("doctor passed stream_anchor on %d slots, want the 5 shards' of both sets:\n%s", n, out)
	}
	// recover --dry-run on shard 0 of 3 checks it as that shard's, from the cut on.
	out, code := w.walbox(env, "recover", "--dry-run", "--slot", set3.SlotName(0), "--publication", set3.PublicationName(0))
	if code != 0 || comparedRows(out)[set3.SlotName(0)] == 0 {
		t.Errorf("walbox recover --dry-run on %s exited %d; want 0, and its rows compared with the stream:\n%s", set3.SlotName(0), code, out)
	}
}

// The stream fault test on a three-node cluster: two databases publish into one stream, and
// their relays are SIGKILLed again and again while one replica of the stream is held back. Each
// new session reads its anchor; the client reads from a replica, at random, and the one held
// back shows an old end. The stream then holds every committed row of both databases exactly
// once, each database's in commit order. Taking what the lagging replica showed for the anchor,
// a session stored its replay again.
func TestStreamOnThreeNodesWithALaggingReplica(t *testing.T) {
	heavy(t)
	cluster := testenv.StartStreamCluster(t)
	var urls []string
	for _, n := range cluster.Nodes() {
		urls = append(urls, n.StreamURL())
	}
	name := testenv.UniqueName("events")
	env := []string{"WALBOX_STREAM_URL=" + strings.Join(urls, ","), "WALBOX_STREAM=" + name}
	sr := readStream(t, urls[0], name)
	pg := testenv.SharedPostgres(t)
	type db struct {
		w  *world
		wr *writer
		r  *relay
	}
	var dbs []*db
	for i := range 2 {
		d := &db{w: newWorld(t, pg, cluster.Node(i))}
		d.wr = d.w.startWriter(checker.WriterConfig{Seed: uint64(time.Now().UnixNano()) + uint64(i), MaxTx: 10,
			Pause: 10 * time.Millisecond, Rollback: 0.1, Emit: 0.2})
		d.r = d.w.startRelay(env...)
		dbs = append(dbs, d)
	}
	sr.progress(t, 300, 2*time.Minute)
	resume := cluster.HoldBackReplica(t, name)
	for i := range 6 {
		time.Sleep(time.Second)
		for _, d := range dbs {
			d.r.Kill()
			d.r = d.w.startRelay(env...)
		}
		t.Logf("kill %d", i+1)
	}
	time.Sleep(2 * time.Second)
	resume()
	sr.progress(t, 300, 2*time.Minute)
	total := 0
	for _, d := range dbs {
		d.wr.stop()
		if err := d.wr.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		total += len(d.wr.Committed())
	}
	sr.wait(t, total, 3*time.Minute)
	time.Sleep(3 * time.Second) // anything stored twice would be there by now
	producers := map[string][]*amqp.Message{}
	for _, m := range sr.messages() {
		p, _ := m.ApplicationProperties["walbox-producer"].(string)
		producers[p] = append(producers[p], m)
	}
	if len(producers) != 2 {
		t.Fatalf("producers in the stream: %d, want one per database", len(producers))
	}
	for _, d := range dbs {
		var of []*amqp.Message
		for p, msgs := range producers {
			if strings.Contains(p, "-"+d.w.slot+"-") {
				of = msgs
			}
		}
		checkStream(t, d.wr.Committed(), of, d.wr.Stats())
	}
	if n := sr.count(); n != total {
		t.Errorf("%d messages in the stream, want the %d rows committed", n, total)
	}
}

// checkCut waits until the stream holds every row of committed, and a little more for anything
// stored twice. It fails the test if a row committed before the cut of a reshard is stored twice:
// the new set's relays skip those, which the old set delivers. Rows after the cut may be stored
// twice (docs/streams.md). It fails the test, too, if no row lies on one side of the cut.
func (sr *streamReader) checkCut(t *testing.T, committed []checker.Row, cut pglogrepl.LSN) {
	t.Helper()
	seen := map[string]int{}
	var before, after, twiceBefore, twiceAfter int
	count := func() {
		clear(seen)
		before, after, twiceBefore, twiceAfter = 0, 0, 0, 0
		for _, m := range sr.messages() {
			id := fmt.Sprint(m.Properties.MessageID)
			seen[id]++
			pos, _ := m.ApplicationProperties["walbox-position"].(string)
			f := strings.Split(pos, "/")
			lsn, _ := pglogrepl.ParseLSN(strings.Join(f[1:3], "/"))
			switch {
			case lsn < cut && seen[id] > 1:
				twiceBefore++
			case lsn < cut:
				before++
			case seen[id] > 1:
				twiceAfter++
			default:
				after++
			}
		}
	}
	waitFor(t, 3*time.Minute, "every committed row in the stream", func() bool {
		count()
		for _, r := range committed {
			if seen[r.ID] == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(3 * time.Second) // anything stored twice would be there by now
	count()
	t.Logf("cut %s: %d rows before it, %d after; stored twice: %d before, %d after", cut, before, after, twiceBefore, twiceAfter)
	if twiceBefore != 0 {
		t.Errorf("%d rows committed before the cut stored twice", twiceBefore)
	}
	if before == 0 || after == 0 {
		t.Errorf("rows before the cut %d, after %d: the test proved little", before, after)
	}
}
