package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/schedule"
	"github.com/walbox/walbox/wire"
)

// A cancel of a message the sender is publishing waits for the sender's commit, then says false:
// the message left. It neither says true for a message that left, nor deadlocks with the sender.
func TestCancelDuringSendWaitsAndSaysSent(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db, conn := pg.MigratedDatabase(t, migrations.Config{})
	ctx := context.Background()
	id := uuid.New()
	pg.Exec(t, db, `INSERT INTO walbox_schedule (slot_name, message_id, deliver_at, id, aggregate_type, aggregate_id,
		event_type, payload, headers, amqp_id, routing_key, exchange)
		VALUES ('s', $1::text, pg_catalog.now(), $1::uuid, 'order', '1', 'order.reminder', '{}', '{}', '', '', '')`, id.String())
	pub := newGated()
	stop := run(gatedSender(db, pub, 0))
	defer stop()
	pub.awaitPublished(t, 1, stop)
	answer := make(chan error, 1)
	var waiting bool
	go func() {
		answer <- conn.QueryRow(ctx, "SELECT walbox_cancel($1::text)", id.String()).Scan(&waiting)
	}()
	select {
	case err := <-answer:
		t.Fatalf("the cancel answered %v (%v) while the message was being sent, before its confirm", waiting, err)
	case <-time.After(2 * time.Second):
	}
	close(pub.open)
	select {
	case err := <-answer:
		if err != nil || waiting {
			t.Fatalf("cancel after the send: %v, %v; want false", waiting, err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the cancel did not return after the sender's commit")
	}
}

// broker is a session of a fake broker. It returns the messages of one id (refuse), and closes at
// one larger than max bytes, as RabbitMQ closes the channel (406). It counts what it confirmed and
// parked, by id, over every session dialed.
type broker struct {
	refuse   string
	max      int // 0: no limit
	mu       *sync.Mutex
	sent     map[string]int // publishes by id, confirmed or not
	parked   map[string]int
	confirms chan wire.Confirm
	seq      uint64
	closed   bool
	// late holds back the confirms of the first session dialed. Its close drops them unsent.
	late bool
	held []wire.Confirm
}

// dialer returns a Dial of fresh sessions of b's broker.
func (b *broker) dialer() func(context.Context) (wire.Publisher, error) {
	late := b.late
	return func(context.Context) (wire.Publisher, error) {
		s := &broker{refuse: b.refuse, max: b.max, mu: b.mu, sent: b.sent, parked: b.parked, confirms: make(chan wire.Confirm, 16), late: late}
		late = false
		return s, nil
	}
}

func (p *broker) send(m *wire.Message, parked bool) (uint64, error) {
	if p.closed {
		return 0, fmt.Errorf("publish: %w", wire.ErrSessionClosed)
	}
	p.seq++
	if p.max > 0 && len(m.Payload) > p.max {
		p.closed = true
		p.confirms <- wire.Confirm{Err: fmt.Errorf("%w: %w", wire.ErrSessionClosed, &wire.TooLargeError{Reason: "message size is larger than configured max size"})}
		close(p.confirms)
		return p.seq, nil
	}
	p.mu.Lock()
	if parked {
		p.parked[m.AMQPMessageID()]++
	} else {
		p.sent[m.AMQPMessageID()]++
	}
	p.mu.Unlock()
	c := wire.Confirm{Seq: p.seq}
	if m.AMQPMessageID() == p.refuse {
		c.Err = errors.New("returned by the broker: 312 NO_ROUTE")
	}
	if p.late {
		p.held = append(p.held, c)
		return p.seq, nil
	}
	p.confirms <- c
	return p.seq, nil
}

func (p *broker) Publish(_ context.Context, m *wire.Message) (uint64, error) {
	return p.send(m, false)
}
func (p *broker) Park(_ context.Context, pk *wire.Parked) (uint64, error) {
	return p.send(&pk.Message, true)
}
func (p *broker) Confirms() <-chan wire.Confirm { return p.confirms }
func (p *broker) Close() error                  { return nil }

// scheduleDB returns the shared PostgreSQL, a migrated database, and a connection to it.
var scheduleDB = schedule.MigratedDB

// insertDue records each of ids in slot s, due n seconds ago for the nth from the end: in order.
// The payload of the id big is large.
func insertDue(t *testing.T, pg *testenv.Postgres, db string, ids []string, big string) {
	t.Helper()
	for i, id := range ids {
		payload := `{}`
		if id == big {
			payload = `{"pad":"` + strings.Repeat("x", 100) + `"}`
		}
		pg.Exec(t, db, `INSERT INTO walbox_schedule (slot_name, message_id, deliver_at, id, aggregate_type, aggregate_id,
			event_type, payload, headers, amqp_id, routing_key, exchange)
			VALUES ('s', $1::text, pg_catalog.now() - pg_catalog.make_interval(secs => $2), $1::uuid, 'order', '1', 'order.reminder', $3::bytea, '{}', '', '', '')`,
			id, len(ids)-i, []byte(payload))
	}
}

// run runs s until the returned function stops it, and waits for it.
func run(s *schedule.Sender) func() {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }() //nolint:errcheck // it returns nil when ctx ends
	return func() { stop(); <-done }
}

// waitEmpty waits until the schedule is empty, and fails the test after within.
func waitEmpty(t *testing.T, conn *pgx.Conn, within time.Duration, stop func()) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var n int
		if err := conn.QueryRow(context.Background(), "SELECT pg_catalog.count(*) FROM walbox_schedule").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("%d messages still wait after %s", n, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// newSender returns a sender of slot s on db, in batches of batch, over sessions of b.
func newSender(db string, b *broker, batch int) *schedule.Sender {
	return schedule.NewSender(schedule.SenderConfig{DatabaseURL: db, Schema: "public", Slot: "s", Batch: batch, Active: func() bool { return true },
		Dial: b.dialer()})
}

// batchSizes are the batch sizes the sender's fault tests run with: one batch, and several on their
// way at once.
var batchSizes = []int{schedule.DefaultBatch, 2}

func newBroker() *broker {
	return &broker{mu: &sync.Mutex{}, sent: map[string]int{}, parked: map[string]int{}}
}

// The broker refuses one due message of a batch every time (unroutable, say). Its retries send
// that message alone: the messages confirmed beside it leave the schedule, and are not sent again.
func TestARefusedMessageDoesNotSendItsBatchAgain(t *testing.T) {
	for _, batch := range batchSizes {
		t.Run(fmt.Sprintf("batch %d", batch), func(t *testing.T) {
			pg, db, conn := scheduleDB(t)
			ids := []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}
			insertDue(t, pg, db, ids, "")
			b := newBroker()
			b.refuse = ids[1]
			stop := run(newSender(db, b, batch))
			deadline := time.Now().Add(time.Minute)
			for {
				b.mu.Lock()
				n := b.sent[b.refuse]
				b.mu.Unlock()
				if n >= 4 {
					break
				}
				if time.Now().After(deadline) {
					stop()
					t.Fatalf("the refused message was published %d times in a minute, want retries", n)
				}
				time.Sleep(50 * time.Millisecond)
			}
			stop()
			b.mu.Lock()
			defer b.mu.Unlock()
			for _, id := range []string{ids[0], ids[2]} {
				if b.sent[id] != 1 {
					t.Errorf("message %s, confirmed, was published %d times while %s was refused %d times; want once",
						id, b.sent[id], b.refuse, b.sent[b.refuse])
				}
			}
			var left []string
			if err := conn.QueryRow(context.Background(), "SELECT pg_catalog.array_agg(message_id) FROM walbox_schedule").Scan(&left); err != nil {
				t.Fatal(err)
			}
			if len(left) != 1 || left[0] != b.refuse {
				t.Errorf("the schedule holds %v, want only the refused %s", left, b.refuse)
			}
		})
	}
}

// A record can commit beside a cancel's tombstone: its insert's snapshot did not see the cancel.
// The sender then drops it when due, by the tombstone. Pruning the week-old tombstone first must
// not let such a message, due after a week, leave.
func TestAnOldTombstoneStillStopsItsWaitingRecord(t *testing.T) {
	pg, db, conn := scheduleDB(t)
	id := uuid.NewString()
	insertDue(t, pg, db, []string{id}, "")
	pg.Exec(t, db, `INSERT INTO walbox_schedule_done (message_id, slot_name, state, done_at)
		VALUES ($1, '', 'cancelled', pg_catalog.now() - interval '8 days')`, id)
	b := newBroker()
	stop := run(newSender(db, b, 0))
	waitEmpty(t, conn, time.Minute, stop)
	stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sent[id] != 0 {
		t.Errorf("the cancelled message was published %d times", b.sent[id])
	}
}

// A stop while a batch awaits its confirms (a rolling update, say) lets the batch finish: once
// confirmed, its messages leave the schedule. Otherwise the next relay would send them again,
// though nothing failed.
func TestAStopFinishesTheBatchBeingSent(t *testing.T) {
	pg, db, conn := scheduleDB(t)
	insertDue(t, pg, db, []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}, "")
	pub := newGated()
	stop := run(gatedSender(db, pub, 0))
	pub.awaitPublished(t, 3, stop)
	pub.stopThenOpen(stop) // the confirms arrive after the stop
	var waiting, sent int
	if err := conn.QueryRow(context.Background(), "SELECT (SELECT pg_catalog.count(*) FROM walbox_schedule), "+
		"(SELECT pg_catalog.count(*) FROM walbox_schedule_done WHERE 's' = ANY (sent_by))").Scan(&waiting, &sent); err != nil {
		t.Fatal(err)
	}
	if waiting != 0 || sent != 3 {
		t.Errorf("after the stop %d messages wait and %d are noted sent; want 0 and 3: the next relay sends the batch again", waiting, sent)
	}
}

// A due message larger than the broker takes closes the session at each try. It is parked without
// its payload, as the relay parks such a row, and the messages due after it leave. Before, it was
// sent again every turn, and nothing due after it ever left.
func TestAMessageTooLargeForTheBrokerIsParked(t *testing.T) {
	for _, batch := range batchSizes {
		t.Run(fmt.Sprintf("batch %d", batch), func(t *testing.T) { tooLargeParked(t, batch, false) })
	}
	// The close may come before the confirms of the batch before. That batch is not the large
	// message's: none of it is parked without its payload. It is sent again.
	t.Run("batch 1, confirms late", func(t *testing.T) { tooLargeParked(t, 1, true) })
}

// tooLargeParked runs TestAMessageTooLargeForTheBrokerIsParked in batches of batch. With late, the
// first session's confirms have not come when the large message closes it.
func tooLargeParked(t *testing.T, batch int, late bool) {
	pg, db, conn := scheduleDB(t)
	ids := []string{uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()}
	big := ids[1]
	insertDue(t, pg, db, ids, big)
	b := newBroker()
	b.max, b.late = 50, late
	stop := run(newSender(db, b, batch))
	waitEmpty(t, conn, 30*time.Second, stop)
	stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.parked[big] != 1 || b.sent[big] != 0 {
		t.Errorf("the large message was parked %d times and sent %d times, want parked once", b.parked[big], b.sent[big])
	}
	for _, id := range []string{ids[0], ids[2], ids[3]} {
		if b.parked[id] != 0 || b.sent[id] == 0 || (!late && b.sent[id] != 1) {
			t.Errorf("message %s was parked %d times and sent %d times, want sent once (or again, once unconfirmed)", id, b.parked[id], b.sent[id])
		}
	}
}

// gated is a session that notes what it publishes, in order. It holds every confirm until open is
// closed; they then come in any order.
type gated struct {
	mu       sync.Mutex
	ids      []string
	seq      uint64
	confirms chan wire.Confirm
	open     chan struct{}
	// Unless nil, the publish of message pauseAt waits for resume, after closing paused.
	paused, resume chan struct{}
	pauseAt        uint64
}

func newGated() *gated { return &gated{confirms: make(chan wire.Confirm), open: make(chan struct{})} }

func (p *gated) Publish(_ context.Context, m *wire.Message) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	seq := p.seq
	p.ids = append(p.ids, m.AMQPMessageID())
	if p.resume != nil && seq == p.pauseAt {
		close(p.paused)
		<-p.resume
	}
	go func() {
		<-p.open
		p.confirms <- wire.Confirm{Seq: seq}
	}()
	return seq, nil
}
func (p *gated) Park(ctx context.Context, pk *wire.Parked) (uint64, error) {
	return p.Publish(ctx, &pk.Message)
}
func (p *gated) Confirms() <-chan wire.Confirm { return p.confirms }
func (p *gated) Close() error                  { return nil }

// published returns the ids published so far, in order.
func (p *gated) published() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.ids...)
}

// awaitPublished waits until p published n messages, and fails the test after a minute.
func (p *gated) awaitPublished(t *testing.T, n int, stop func()) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(p.published()) < n {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("%d messages published, no confirm given, within a minute; want %d", len(p.published()), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopThenOpen stops the sender with stop, and gives the confirms while it stops.
func (p *gated) stopThenOpen(stop func()) {
	go func() {
		time.Sleep(200 * time.Millisecond)
		close(p.open)
	}()
	stop()
}

// dueIDs records n new ids in slot s, due in that order (insertDue), and returns them.
func dueIDs(t *testing.T, pg *testenv.Postgres, db string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.NewString()
	}
	insertDue(t, pg, db, ids, "")
	return ids
}

// gatedSender returns a sender of slot s on db, in batches of batch, over the session p.
func gatedSender(db string, p *gated, batch int) *schedule.Sender {
	return schedule.NewSender(schedule.SenderConfig{DatabaseURL: db, Schema: "public", Slot: "s", Batch: batch,
		Dial: func(context.Context) (wire.Publisher, error) { return p, nil }, Active: func() bool { return true }})
}

// Many due at once leave at the relay's rate (issue 38): the next batch is read and published while
// the confirms of the one before are on their way. Each batch leaves the schedule once its own
// confirms came. The messages leave in deliver_at order across batches, each once.
func TestTheNextBatchLeavesBeforeTheConfirmsOfTheOneBefore(t *testing.T) {
	pg, db, conn := scheduleDB(t)
	ids := dueIDs(t, pg, db, 7)
	p := newGated()
	stop := run(gatedSender(db, p, 2))
	p.awaitPublished(t, 4, stop) // two batches, and no confirm yet
	var waiting int
	if err := conn.QueryRow(context.Background(), "SELECT pg_catalog.count(*) FROM walbox_schedule").Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	if waiting != len(ids) {
		t.Errorf("%d of %d messages wait before any confirm; a message left the schedule unconfirmed", waiting, len(ids))
	}
	close(p.open)
	waitEmpty(t, conn, time.Minute, stop)
	stop()
	if got := p.published(); !slices.Equal(got, ids) {
		t.Errorf("published %v, want each once in deliver_at order %v", got, ids)
	}
	var sent int
	if err := conn.QueryRow(context.Background(), "SELECT pg_catalog.count(*) FROM walbox_schedule_done WHERE 's' = ANY (sent_by)").Scan(&sent); err != nil {
		t.Fatal(err)
	}
	if sent != len(ids) {
		t.Errorf("%d messages noted sent, want %d", sent, len(ids))
	}
}

// A stop while two batches await their confirms lets both finish: each leaves the schedule once
// confirmed, and no further batch starts. So the next relay sends none of them again, and loses
// none.
func TestAStopFinishesEveryBatchOnItsWay(t *testing.T) {
	pg, db, conn := scheduleDB(t)
	ids := dueIDs(t, pg, db, 5)
	p := newGated()
	stop := run(gatedSender(db, p, 2))
	p.awaitPublished(t, 4, stop)
	p.stopThenOpen(stop) // the confirms arrive after the stop
	if got := p.published(); !slices.Equal(got, ids[:4]) {
		t.Errorf("published %v, want the two batches on their way %v", got, ids[:4])
	}
	var left []string
	var sent int
	if err := conn.QueryRow(context.Background(), "SELECT (SELECT pg_catalog.array_agg(message_id) FROM walbox_schedule), "+
		"(SELECT pg_catalog.count(*) FROM walbox_schedule_done WHERE 's' = ANY (sent_by))").Scan(&left, &sent); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, ids[4:]) || sent != 4 {
		t.Errorf("after the stop %v wait and %d are noted sent; want %v and 4", left, sent, ids[4:])
	}
}

// A lock on the schedule can queue between two batches: a migration's, say. It waits for the first
// batch, which awaits its confirms. The next batch's read waits behind it. That read waits at most
// a second; then the first batch's confirms are taken and it commits. Before, the three waited on
// one another for ever.
func TestALockQueuedBetweenTwoBatchesDoesNotStallThem(t *testing.T) {
	pg, db, conn := scheduleDB(t)
	ids, p, stop := pausedSender(t, pg, db, 4, 2)
	defer stop()
	locked, other := make(chan error, 1), pg.Conn(t, db)
	go func() {
		locked <- pgx.BeginFunc(context.Background(), other, func(tx pgx.Tx) error {
			_, err := tx.Exec(context.Background(), "LOCK TABLE walbox_schedule IN ACCESS EXCLUSIVE MODE")
			return err
		})
	}()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var waiting bool
		if err := conn.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks WHERE NOT granted"+
			" AND relation OPERATOR(pg_catalog.=) 'walbox_schedule'::pg_catalog.regclass)").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lock did not queue behind the first batch")
		}
	}
	close(p.resume)
	select {
	case err := <-locked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the lock, the first batch and the next batch's read wait on one another")
	}
	waitEmpty(t, conn, time.Minute, stop)
	if got := p.published(); !slices.Equal(got, ids) {
		t.Errorf("published %v, want each once in deliver_at order %v", got, ids)
	}
}

// A batch read beside another waits at most a second for a table lock. Its commit waits as long as
// it must: a lock held longer then fails no confirmed batch, and none is sent again.
func TestABatchReadBesideAnotherCommitsPastTheLockWait(t *testing.T) {
	pg, db, conn := scheduleDB(t)
	ids, p, stop := pausedSender(t, pg, db, 6, 1)
	defer stop()
	tx, err := pg.Conn(t, db).Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(context.Background(), "LOCK TABLE walbox_schedule_done IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	close(p.resume)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var waiting int
		if err := conn.QueryRow(context.Background(), "SELECT pg_catalog.count(*) FROM pg_catalog.pg_locks WHERE NOT granted"+
			" AND relation OPERATOR(pg_catalog.=) 'walbox_schedule_done'::pg_catalog.regclass").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting >= 2 { // the first batch's commit, and the commit of one read beside it
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("two batches' commits did not wait for the lock")
		}
	}
	time.Sleep(3 * schedule.PipelineLockWait) // past the wait of a read beside another batch
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, conn, time.Minute, stop)
	if got := p.published(); !slices.Equal(got, ids) {
		t.Errorf("published %v, want each once in deliver_at order %v", got, ids)
	}
}

// pausedSender records n due messages and runs a sender of batches of 2 over a gated session that
// confirms at once. It returns once the publish of message pauseAt waits for p.resume.
func pausedSender(t *testing.T, pg *testenv.Postgres, db string, n int, pauseAt uint64) ([]string, *gated, func()) {
	t.Helper()
	ids := dueIDs(t, pg, db, n)
	p := newGated()
	close(p.open)
	p.paused, p.resume, p.pauseAt = make(chan struct{}), make(chan struct{}), pauseAt
	stop := run(gatedSender(db, p, 2))
	select {
	case <-p.paused: // the first batch holds its rows
	case <-time.After(time.Minute):
		stop()
		t.Fatal("the sender did not publish the due messages")
	}
	return ids, p, stop
}

// warnings is a slog handler that keeps the messages of the warnings logged.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, r.Message)
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

// A relay role limited to one connection (CONNECTION LIMIT) cannot open the next batch's. The
// batches then go one at a time, as over a single connection, with one warning: no turn fails.
// The sender does not try again for each batch: each try costs the server a refused connection,
// and its log a line.
func TestARoleOfOneConnectionSendsOneBatchAtATime(t *testing.T) {
	pg, db, conn := scheduleDB(t)
	ids := dueIDs(t, pg, db, 20)
	role := "sender_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	pg.Exec(t, db, "CREATE ROLE "+role+" LOGIN CONNECTION LIMIT 1")
	t.Cleanup(func() { pg.Exec(t, db, "DROP OWNED BY "+role+"; DROP ROLE "+role) })
	pg.Exec(t, db, "GRANT SELECT, INSERT, UPDATE, DELETE ON public.walbox_schedule, public.walbox_schedule_done TO "+role+
		"; GRANT SELECT ON public.walbox_slots TO "+role)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	w := &warnings{}
	b := newBroker()
	stop := run(schedule.NewSender(schedule.SenderConfig{DatabaseURL: u.String(), Schema: "public", Slot: "s", Batch: 2,
		Active: func() bool { return true }, Dial: b.dialer(), Logger: slog.New(w)}))
	waitEmpty(t, conn, time.Minute, stop)
	stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		if b.sent[id] != 1 {
			t.Errorf("message %s was sent %d times, want once", id, b.sent[id])
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.msgs) != 1 || !strings.Contains(w.msgs[0], "one batch at a time") {
		t.Errorf("warnings %q; want one, that the batches go one at a time", w.msgs)
	}
	if pg.LogFile() == "" {
		return // an external server: its log is not at hand
	}
	log, err := os.ReadFile(pg.LogFile())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), `too many connections for role "`+role+`"`); n != 1 {
		t.Errorf("the server refused %d connections of the sender for %d batches; want 1", n, len(ids)/2)
	}
}

// A connection for the next batch can end while it idles between bursts: idle_session_timeout, say.
// The next burst's batch then goes alone, and the one after it connects again. The turn does not
// fail: no warning, and the broker session stays.
func TestASpareConnectionEndedBetweenBurstsFailsNoTurn(t *testing.T) {
	pg, db, conn := scheduleDB(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", "sender")
	u.RawQuery = q.Encode()
	b := newBroker()
	dial, dials := b.dialer(), 0
	w := &warnings{}
	stop := run(schedule.NewSender(schedule.SenderConfig{DatabaseURL: u.String(), Schema: "public", Slot: "s", Batch: 2,
		Active: func() bool { return true }, Logger: slog.New(w), Dial: func(ctx context.Context) (wire.Publisher, error) {
			dials++
			return dial(ctx)
		}}))
	defer stop()
	var ids []string
	for range 2 {
		ids = append(ids, dueIDs(t, pg, db, 6)...)
		waitEmpty(t, conn, time.Minute, stop)
		// Every connection of the sender but its first ends, as idle_session_timeout ends them.
		var ended []int32
		if err := conn.QueryRow(context.Background(), "SELECT pg_catalog.array_agg(pid) FROM pg_catalog.pg_stat_activity"+
			" WHERE application_name = 'sender' AND backend_start > (SELECT pg_catalog.min(backend_start)"+
			" FROM pg_catalog.pg_stat_activity WHERE application_name = 'sender') AND pg_catalog.pg_terminate_backend(pid)").Scan(&ended); err != nil {
			t.Fatal(err)
		}
		if len(ended) == 0 {
			t.Fatal("the sender opened no connection for a next batch")
		}
		for gone := false; !gone; time.Sleep(20 * time.Millisecond) {
			if err := conn.QueryRow(context.Background(), "SELECT NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity"+
				" WHERE pid = ANY($1))", ended).Scan(&gone); err != nil {
				t.Fatal(err)
			}
		}
	}
	stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.msgs) != 0 || dials != 1 {
		t.Errorf("warnings %q, and %d broker sessions; want none, and one", w.msgs, dials)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		if b.sent[id] != 1 {
			t.Errorf("message %s was sent %d times, want once", id, b.sent[id])
		}
	}
}

// A relay of this version started before walbox migrate applied migration 018. Its notes of sent
// messages cannot be written. It sends nothing, and warns, rather than send each due batch again
// at every retry.
func TestASenderAheadOfItsMigrationSendsNothing(t *testing.T) {
	pg, db, _ := scheduleDB(t)
	// walbox_schedule_done as migration 017 left it.
	pg.Exec(t, db, "ALTER TABLE public.walbox_schedule_done DROP COLUMN sent_by")
	ids := dueIDs(t, pg, db, 1)
	w := &warnings{}
	b := newBroker()
	stop := run(schedule.NewSender(schedule.SenderConfig{DatabaseURL: db, Schema: "public", Slot: "s",
		Active: func() bool { return true }, Dial: b.dialer(), Logger: slog.New(w)}))
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		w.mu.Lock()
		n := len(w.msgs)
		w.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatal("no warning within a minute")
		}
	}
	stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sent[ids[0]] != 0 {
		t.Errorf("message %s was sent %d times before its note could be written; want none", ids[0], b.sent[ids[0]])
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("warnings: %q", w.msgs)
}

// A database whose default isolation is serializable gets each due message once. The sender's
// batches on their way together conflicted there: each failed at its commit, after its confirms,
// and was sent again.
func TestADatabaseThatDefaultsToSerializableGetsEachMessageOnce(t *testing.T) {
	pg, db, conn := scheduleDB(t)
	pg.Exec(t, db, `DO $$ BEGIN EXECUTE pg_catalog.format('ALTER DATABASE %I SET default_transaction_isolation = serializable',
		pg_catalog.current_database()); END $$`)
	const n = 1000
	pg.Exec(t, db, `INSERT INTO walbox_schedule (slot_name, message_id, deliver_at, id, aggregate_type, aggregate_id,
		event_type, payload, headers, amqp_id, routing_key, exchange)
		SELECT 's', u::text, pg_catalog.now() - pg_catalog.make_interval(secs => g.i), u, 'order', '1', 'order.reminder', '{}', '{}', '', '', ''
		FROM (SELECT pg_catalog.gen_random_uuid() AS u, i FROM pg_catalog.generate_series(1, $1::int) i) g`, n)
	b := newBroker()
	stop := run(newSender(db, b, 5)) // its sessions hold 16 confirms: three batches must fit
	waitEmpty(t, conn, 2*time.Minute, stop)
	stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	again := 0
	for _, c := range b.sent {
		if c > 1 {
			again++
		}
	}
	if again > 0 || len(b.sent) != n {
		t.Errorf("%d of %d messages were sent more than once, %d sent in all, with no fault", again, n, len(b.sent))
	}
}

// A cancel still open on one due message holds back that message alone. The batches of the others
// go on together, not one a poll. Its record may land after the cancel's delete looked.
func TestAnOpenCancelHoldsBackItsMessageAlone(t *testing.T) {
	pg, db, conn := scheduleDB(t)
	ctx := context.Background()
	held := dueIDs(t, pg, db, 1)[0]
	pg.Exec(t, db, `INSERT INTO walbox_schedule (slot_name, message_id, deliver_at, id, aggregate_type, aggregate_id,
		event_type, payload, headers, amqp_id, routing_key, exchange)
		SELECT 's', u::text, pg_catalog.now(), u, 'order', '1', 'order.reminder', '{}', '{}', '', '', ''
		FROM (SELECT pg_catalog.gen_random_uuid() AS u FROM pg_catalog.generate_series(1, 1000)) g`)
	tx, err := pg.Conn(t, db).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // the cancel never commits
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock(2002873442, pg_catalog.hashtext($1))", held); err != nil {
		t.Fatal(err)
	}
	b := newBroker()
	stop := run(newSender(db, b, 5)) // its sessions hold 16 confirms: three batches must fit
	defer stop()
	// One batch a poll (500 ms) would take 100 s; the batches on their way together take about a second.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM walbox_schedule").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 1,000 free due messages still wait after 20 s, behind one an open cancel holds", n-1)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sent[held] > 0 {
		t.Errorf("the message an open cancel holds was sent")
	}
}
