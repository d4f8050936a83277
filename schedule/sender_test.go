package schedule_test

import (
	"context"
	"errors"
	"fmt"
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

// held is a session that holds every confirm until released.
type held struct {
	confirms  chan wire.Confirm
	published chan struct{} // closed at the first publish
	release   chan struct{}
	once      sync.Once
	seq       uint64
}

func (p *held) Publish(_ context.Context, _ *wire.Message) (uint64, error) {
	p.seq++
	seq := p.seq
	p.once.Do(func() { close(p.published) })
	go func() {
		<-p.release
		p.confirms <- wire.Confirm{Seq: seq}
	}()
	return seq, nil
}
func (p *held) Park(ctx context.Context, pk *wire.Parked) (uint64, error) {
	return p.Publish(ctx, &pk.Message)
}
func (p *held) Confirms() <-chan wire.Confirm { return p.confirms }
func (p *held) Close() error                  { return nil }

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
	pub := &held{confirms: make(chan wire.Confirm, 8), published: make(chan struct{}), release: make(chan struct{})}
	s := schedule.NewSender(schedule.SenderConfig{DatabaseURL: db, Schema: "public", Slot: "s",
		Dial: func(context.Context) (wire.Publisher, error) { return pub, nil }, Active: func() bool { return true }})
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go s.Run(sctx) //nolint:errcheck // it returns nil when sctx ends
	select {
	case <-pub.published:
	case <-time.After(time.Minute):
		t.Fatal("the sender did not publish the due message")
	}
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
	close(pub.release)
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
}

// dialer returns a Dial of fresh sessions of b's broker.
func (b *broker) dialer() func(context.Context) (wire.Publisher, error) {
	return func(context.Context) (wire.Publisher, error) {
		return &broker{refuse: b.refuse, max: b.max, mu: b.mu, sent: b.sent, parked: b.parked, confirms: make(chan wire.Confirm, 16)}, nil
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

// scheduleDB returns a migrated database, and a connection to it.
func scheduleDB(t *testing.T) (*testenv.Postgres, string, *pgx.Conn) {
	t.Helper()
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db, conn := pg.MigratedDatabase(t, migrations.Config{})
	return pg, db, conn
}

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

// newSender returns a sender of slot s on db, over sessions of b.
func newSender(db string, b *broker) *schedule.Sender {
	return schedule.NewSender(schedule.SenderConfig{DatabaseURL: db, Schema: "public", Slot: "s", Active: func() bool { return true },
		Dial: b.dialer()})
}

func newBroker() *broker {
	return &broker{mu: &sync.Mutex{}, sent: map[string]int{}, parked: map[string]int{}}
}

// The broker refuses one due message of a batch every time (unroutable, say). Its retries send
// that message alone: the messages confirmed beside it leave the schedule, and are not sent again.
func TestARefusedMessageDoesNotSendItsBatchAgain(t *testing.T) {
	pg, db, conn := scheduleDB(t)
	ids := []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}
	insertDue(t, pg, db, ids, "")
	b := newBroker()
	b.refuse = ids[1]
	stop := run(newSender(db, b))
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
	stop := run(newSender(db, b))
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
	pub := &held{confirms: make(chan wire.Confirm, 8), published: make(chan struct{}), release: make(chan struct{})}
	stop := run(schedule.NewSender(schedule.SenderConfig{DatabaseURL: db, Schema: "public", Slot: "s",
		Dial: func(context.Context) (wire.Publisher, error) { return pub, nil }, Active: func() bool { return true }}))
	select {
	case <-pub.published:
	case <-time.After(time.Minute):
		t.Fatal("the sender did not publish the due messages")
	}
	time.Sleep(200 * time.Millisecond) // the rest of the batch
	go func() {
		time.Sleep(200 * time.Millisecond)
		close(pub.release) // the confirms arrive after the stop
	}()
	stop()
	var waiting, sent int
	if err := conn.QueryRow(context.Background(), "SELECT (SELECT pg_catalog.count(*) FROM walbox_schedule), "+
		"(SELECT pg_catalog.count(*) FROM walbox_schedule_done WHERE slot_name = 's')").Scan(&waiting, &sent); err != nil {
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
	pg, db, conn := scheduleDB(t)
	ids := []string{uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()}
	big := ids[1]
	insertDue(t, pg, db, ids, big)
	b := newBroker()
	b.max = 50
	stop := run(newSender(db, b))
	waitEmpty(t, conn, 30*time.Second, stop)
	stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.parked[big] != 1 || b.sent[big] != 0 {
		t.Errorf("the large message was parked %d times and sent %d times, want parked once", b.parked[big], b.sent[big])
	}
	for _, id := range []string{ids[0], ids[2], ids[3]} {
		if b.sent[id] != 1 {
			t.Errorf("message %s was sent %d times, want once", id, b.sent[id])
		}
	}
}
