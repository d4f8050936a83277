package parked_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/internal/parked"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/wire"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// fixture is an exchange with a consumers' queue bound to every key, and its park queue.
type fixture struct {
	t        *testing.T
	cfg      parked.Config
	exchange string
	queue    string
	ch       *amqp.Channel
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	r := testenv.SharedRabbit(t)
	pcfg := publisher.Config{URL: r.URL(), Exchange: testenv.UniqueName("outbox")}
	f := &fixture{t: t, exchange: pcfg.Exchange, queue: testenv.UniqueName("q")}
	f.cfg.Dial = func(ctx context.Context) (*publisher.Session, error) { return publisher.Dial(ctx, pcfg) }
	conn, err := amqp.Dial(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if f.ch, err = conn.Channel(); err != nil {
		t.Fatal(err)
	}
	s := f.session()
	defer s.Close()
	if _, err := f.ch.QueueDeclare(f.queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.ch.QueueBind(f.queue, "#", f.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) session() *publisher.Session {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := f.cfg.Dial(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// park parks each of ps on one session and waits for the confirms.
func (f *fixture) park(ps ...*wire.Parked) {
	f.t.Helper()
	s := f.session()
	defer s.Close()
	for _, p := range ps {
		if _, err := s.Park(context.Background(), p); err != nil {
			f.t.Fatal(err)
		}
		if err := s.Flush(); err != nil {
			f.t.Fatal(err)
		}
		select {
		case c := <-s.Confirms():
			if c.Err != nil {
				f.t.Fatal(c.Err)
			}
		case <-time.After(time.Minute):
			f.t.Fatal("no confirm")
		}
	}
}

func (f *fixture) list() []publisher.ParkedMessage {
	f.t.Helper()
	l, err := parked.List(context.Background(), f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return l.Messages
}

func ids(msgs []publisher.ParkedMessage) []string {
	var out []string
	for _, p := range msgs {
		out = append(out, p.ID)
	}
	return out
}

// consumed gets every message of the consumers' queue.
func (f *fixture) consumed() []amqp.Delivery {
	f.t.Helper()
	var out []amqp.Delivery
	for {
		d, ok, err := f.ch.Get(f.queue, true)
		if err != nil {
			f.t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

func message(eventType string, headers map[string]any) wire.Message {
	return wire.Message{ID: uuid.New(), AggregateType: "order", AggregateID: "7", EventType: eventType,
		Payload: []byte(`{"n":1}`), Headers: headers, CreatedAt: time.Now().Truncate(time.Second)}
}

// Listing returns every parked message and leaves them all in place, in order, however often.
// A replayed message from the parked copy reaches the consumers once, with its original id,
// headers and routing key, and leaves the park queue. One whose copy lacks its payload, or still
// has a reserved header, is parked again with its reason. A discard removes only the ids given.
func TestParkQueueListReplayDiscard(t *testing.T) {
	f := newFixture(t)
	good := message("order.created", map[string]any{"trace": "abc", "n": int64(5)})
	good.RoutingKey = "orders.eu"
	good.CommitTime = time.Date(2026, 11, 28, 7, 0, 0, 123456000, time.UTC)
	big := message("order.big", nil)
	big.Payload = nil
	bad := message("order.bad", map[string]any{"x-walbox-mine": "1"})
	other := message("order.other", nil)
	f.park(
		&wire.Parked{Message: good, Reason: "exchange missing", Table: "public.outbox", LSN: "0/1"},
		&wire.Parked{Message: big, Reason: "body too large", Table: "public.outbox", LSN: "0/2", Size: 5000},
		&wire.Parked{Message: bad, Reason: "reserved header", Table: "public.outbox", LSN: "0/3"},
		&wire.Parked{Message: other, Reason: "whatever", Table: "public.outbox", LSN: "0/4"},
		&wire.Parked{Message: other, Reason: "parked twice", Table: "public.outbox", LSN: "0/4"},
	)
	want := []string{good.ID.String(), big.ID.String(), bad.ID.String(), other.ID.String(), other.ID.String()}
	for range 3 {
		if got := ids(f.list()); !slices.Equal(got, want) {
			t.Fatalf("list = %v, want %v", got, want)
		}
	}
	msgs := f.list()
	if p := msgs[1]; p.Size != 5000 || !p.BodyDropped() || p.Table != "public.outbox" || p.LSN != "0/2" ||
		p.Reason != "body too large" || time.Since(p.ParkedAt) > time.Hour {
		t.Fatalf("the big row listed as %+v", p)
	}

	var outcomes []parked.Outcome
	report := func(o parked.Outcome) { outcomes = append(outcomes, o) }
	ctx := context.Background()
	if err := parked.Replay(ctx, f.cfg, []string{good.ID.String(), big.ID.String(), bad.ID.String()}, false, report); err != nil {
		t.Fatal(err)
	}
	got := f.consumed()
	if len(got) != 1 {
		t.Fatalf("consumers got %d messages, want the one replayable", len(got))
	}
	d := got[0]
	if d.MessageId != good.ID.String() || d.RoutingKey != "orders.eu" || d.Type != "order.created" ||
		d.Headers["trace"] != "abc" || d.Headers["n"] != int64(5) || string(d.Body) != `{"n":1}` || d.Exchange != f.exchange ||
		d.Headers[wire.HeaderCommitTime] != wire.FormatCommitTime(good.CommitTime) {
		t.Fatalf("replayed as id %s key %s type %s headers %v body %s on %s", d.MessageId, d.RoutingKey, d.Type, d.Headers, d.Body, d.Exchange)
	}
	actions := map[string]string{}
	for _, o := range outcomes {
		actions[o.ID] = o.Action + ": " + o.Reason
	}
	if !strings.HasPrefix(actions[good.ID.String()], "replayed") ||
		!strings.Contains(actions[big.ID.String()], "lacks the payload of 5000 bytes") ||
		!strings.Contains(actions[bad.ID.String()], "x-walbox-mine") {
		t.Fatalf("outcomes %v", actions)
	}

	// The ones parked again are at the back, after the one not touched.
	want = []string{other.ID.String(), other.ID.String(), big.ID.String(), bad.ID.String()}
	if got := ids(f.list()); !slices.Equal(got, want) {
		t.Fatalf("after the replay, list = %v, want %v", got, want)
	}
	if err := parked.Discard(ctx, f.cfg, []string{other.ID.String()}, false, report); err != nil {
		t.Fatal(err)
	}
	if got, want := ids(f.list()), want[2:]; !slices.Equal(got, want) {
		t.Fatalf("after the discard, list = %v, want %v", got, want)
	}
	err := parked.Discard(ctx, f.cfg, []string{"no-such-id"}, false, report)
	if !errors.Is(err, parked.ErrUnknownID) {
		t.Fatalf("discard of an unknown id: %v, want ErrUnknownID", err)
	}
	if got := ids(f.list()); len(got) != 2 {
		t.Fatalf("an unknown id changed the queue: %v", got)
	}
	if err := parked.Discard(ctx, f.cfg, nil, true, report); err != nil {
		t.Fatal(err)
	}
	if got := f.list(); len(got) != 0 {
		t.Fatalf("after discard --all, list = %v", ids(got))
	}
}

// RabbitMQ 4.0 drops a quorum queue's message returned more than 20 times (its default
// delivery-limit), and every list returns it. walbox parks a message anew before that: it
// survives 30 lists, once, with its headers and body. The list right after a renewal shows it.
func TestListingAQuorumQueueOftenLosesNothing(t *testing.T) {
	r := testenv.StartRabbit(t, testenv.RabbitVersion("4.0"))
	pcfg := publisher.Config{URL: r.URL(), Exchange: testenv.UniqueName("outbox"), QueueType: publisher.QueueQuorum}
	f := &fixture{t: t}
	f.cfg.Dial = func(ctx context.Context) (*publisher.Session, error) { return publisher.Dial(ctx, pcfg) }
	m := message("order.x", map[string]any{"trace": "t"})
	f.park(&wire.Parked{Message: m, Reason: "r", Table: "public.outbox", LSN: "0/9"})
	for i := range 30 {
		msgs := f.list()
		if len(msgs) != 1 || msgs[0].ID != m.ID.String() {
			t.Fatalf("list %d shows %v, want %s once", i+1, ids(msgs), m.ID)
		}
		if p := msgs[0]; p.Reason != "r" || p.LSN != "0/9" || string(p.Body) != `{"n":1}` || p.Headers["x-walbox-headers"] != `{"trace":"t"}` {
			t.Fatalf("list %d: the message became %+v", i+1, p)
		}
		// The copy parked anew starts from no returns: the reader did not take it as well.
		if got, want := msgs[0].Returned, int64(i%6); got != want {
			t.Fatalf("list %d: returned %d times, want %d", i+1, got, want)
		}
	}
}

// A command reads at most Config.Limit messages, which it holds in memory, and says how many more
// there are. An id past the limit is unknown, and the error says only the first were read. The
// messages not read stay parked.
func TestACommandReadsAtMostItsLimit(t *testing.T) {
	f := newFixture(t)
	var ms []wire.Message
	for i := range 5 {
		m := message("order.x", nil)
		ms = append(ms, m)
		f.park(&wire.Parked{Message: m, Reason: "r", Table: "public.outbox", LSN: "0/" + string(rune('1'+i))})
	}
	f.cfg.Limit = 3
	l, err := parked.List(context.Background(), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(l.Messages); len(got) != 3 || got[0] != ms[0].ID.String() || l.More != 2 {
		t.Fatalf("list with limit 3 = %v and %d more, want the first 3 and 2 more", got, l.More)
	}
	err = parked.Discard(context.Background(), f.cfg, []string{ms[4].ID.String()}, false, func(parked.Outcome) {})
	if !errors.Is(err, parked.ErrUnknownID) || !strings.Contains(err.Error(), "first 3 of 5") {
		t.Fatalf("discard of an id past the limit: %v, want unknown, naming the first 3 of 5", err)
	}
	f.cfg.Limit = 0
	if got := f.list(); len(got) != 5 {
		t.Fatalf("after the limited reads, list shows %v, want all 5", ids(got))
	}
}

// Parked copies name their database. Each database's commands list, replay and discard only its
// own and those naming none (parked by an older walbox). Another's id is refused as such.
func TestEachDatabaseActsOnItsOwnParkedCopies(t *testing.T) {
	f := newFixture(t)
	mine, theirs, old := message("order.a", nil), message("order.b", nil), message("order.c", nil)
	f.park(
		&wire.Parked{Message: mine, Reason: "r", Table: "public.outbox", Database: "1/a"},
		&wire.Parked{Message: theirs, Reason: "r", Table: "public.outbox", Database: "2/a"},
		&wire.Parked{Message: old, Reason: "r", Table: "public.outbox"},
	)
	f.cfg.Database = "1/a"
	ctx := context.Background()
	l, err := parked.List(ctx, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(l.Messages), []string{mine.ID.String(), old.ID.String()}; !slices.Equal(got, want) || l.Others[theirs.ID.String()] != "2/a" {
		t.Fatalf("list = %v, others %v; want %v, and %s of 2/a", got, l.Others, want, theirs.ID)
	}
	err = parked.Discard(ctx, f.cfg, []string{theirs.ID.String()}, false, func(parked.Outcome) {})
	if !errors.Is(err, parked.ErrOtherDatabase) {
		t.Fatalf("discard of another database's id: %v, want ErrOtherDatabase", err)
	}
	if err := parked.Discard(ctx, f.cfg, nil, true, func(parked.Outcome) {}); err != nil {
		t.Fatal(err)
	}
	f.cfg.Database = "2/a"
	if got := ids(f.list()); !slices.Equal(got, []string{theirs.ID.String()}) {
		t.Fatalf("after the first database's discard --all, the second lists %v", got)
	}
}

// Every run reads the park queue, and a quorum queue counts each return, also of a run that
// failed (an unknown id, say). Such runs renew the messages too: 25 of them lose nothing on
// RabbitMQ 4.0, which drops a message returned more than 20 times.
func TestFailedRunsOnAQuorumQueueLoseNothing(t *testing.T) {
	r := testenv.StartRabbit(t, testenv.RabbitVersion("4.0"))
	pcfg := publisher.Config{URL: r.URL(), Exchange: testenv.UniqueName("outbox"), QueueType: publisher.QueueQuorum}
	f := &fixture{t: t}
	f.cfg.Dial = func(ctx context.Context) (*publisher.Session, error) { return publisher.Dial(ctx, pcfg) }
	m := message("order.x", nil)
	f.park(&wire.Parked{Message: m, Reason: "r", Table: "public.outbox", LSN: "0/9"})
	for i := range 25 {
		err := parked.Discard(context.Background(), f.cfg, []string{"no-such-id"}, false, func(parked.Outcome) {})
		if !errors.Is(err, parked.ErrUnknownID) {
			t.Fatalf("run %d: %v, want ErrUnknownID", i+1, err)
		}
	}
	if got := ids(f.list()); !slices.Equal(got, []string{m.ID.String()}) {
		t.Fatalf("after 25 failed runs, list shows %v, want %s", got, m.ID)
	}
}

// An outbox table with bigint ids emptied by TRUNCATE ... RESTART IDENTITY hands a parked row's id
// to a new row. Replay sends the parked row from its copy, not the new row under its id.
func TestReplayOfAnIDTakenByANewerRowSendsTheParkedOne(t *testing.T) {
	f := newFixture(t)
	pg := testenv.SharedPostgres(t)
	db := pg.Conn(t, pg.NewDatabase(t))
	ctx := context.Background()
	if _, err := db.Exec(ctx, `CREATE TABLE public.events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		aggregate_type text NOT NULL, aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb NOT NULL,
		headers jsonb, created_at timestamptz NOT NULL DEFAULT pg_catalog.now())`); err != nil {
		t.Fatal(err)
	}
	insert := func(eventType, createdAt string) string {
		var id string
		if err := db.QueryRow(ctx, `INSERT INTO public.events (aggregate_type, aggregate_id, event_type, payload, created_at)
			VALUES ('order', '7', $1, '{"n": 1}', $2) RETURNING id::text`, eventType, createdAt).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	old := insert("order.old", "2026-01-02T03:04:05Z")
	parkedRow := wire.Message{MessageID: old, AggregateType: "order", AggregateID: "7", EventType: "order.old",
		Payload: []byte(`{"n":1}`), CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	f.park(&wire.Parked{Message: parkedRow, Reason: "exchange missing", Table: "public.events", LSN: "0/1"})
	if _, err := db.Exec(ctx, "TRUNCATE public.events RESTART IDENTITY"); err != nil {
		t.Fatal(err)
	}
	if id := insert("order.new", "2026-11-28T08:00:00Z"); id != old {
		t.Fatalf("the new row got id %s, want %s again", id, old)
	}
	f.cfg.DB, f.cfg.Mappings = db, []wire.Mapping{{Table: wire.Table{Schema: "public", Name: "events"}}}
	var outcomes []parked.Outcome
	if err := parked.Replay(ctx, f.cfg, []string{old}, false, func(o parked.Outcome) { outcomes = append(outcomes, o) }); err != nil {
		t.Fatal(err)
	}
	got := f.consumed()
	if len(got) != 1 || got[0].MessageId != old || got[0].Type != "order.old" {
		var types []string
		for _, d := range got {
			types = append(types, d.MessageId+" "+d.Type)
		}
		t.Fatalf("consumers got %v, want %s as order.old, from its parked copy", types, old)
	}
	if len(outcomes) != 1 || outcomes[0].Source != "parked copy" {
		t.Fatalf("outcomes %+v, want one replay from the parked copy", outcomes)
	}
}
