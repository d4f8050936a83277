package slots_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/wire"
)

// fakeStream is a stream publisher that stores what it is given, confirms it at once, and holds
// the ids in holds; drop names published ids the broker "dropped as duplicates".
type fakeStream struct {
	holds, drop map[string]bool
	confirms    chan wire.Confirm
	published   []string
	positions   [][2]uint64 // lsn, index of each At
	bound       string
	seq         uint64
}

func newFakeStream(holds, drop map[string]bool) *fakeStream {
	return &fakeStream{holds: holds, drop: drop, confirms: make(chan wire.Confirm, 1024)}
}

func (f *fakeStream) Publish(_ context.Context, m *wire.Message) (uint64, error) {
	f.seq++
	f.published = append(f.published, m.AMQPMessageID())
	f.confirms <- wire.Confirm{Seq: f.seq, At: time.Now()}
	return f.seq, nil
}

func (f *fakeStream) Park(context.Context, *wire.Parked) (uint64, error) {
	f.seq++
	f.confirms <- wire.Confirm{Seq: f.seq, At: time.Now()}
	return f.seq, nil
}

func (f *fakeStream) Confirms() <-chan wire.Confirm { return f.confirms }
func (f *fakeStream) Close() error                  { return nil }

func (f *fakeStream) Bind(_ context.Context, system uint64, database string) error {
	f.bound = database
	return nil
}

func (f *fakeStream) At(_ int32, lsn uint64, index int) {
	f.positions = append(f.positions, [2]uint64{lsn, uint64(index)})
}

func (f *fakeStream) Held(_ int32, _ uint64, ids map[string]bool) (map[string]bool, error) {
	out := map[string]bool{}
	stored := map[string]bool{}
	for _, id := range f.published {
		stored[id] = !f.drop[id]
	}
	for id := range ids {
		if f.holds[id] || stored[id] {
			out[id] = true
		}
	}
	return out, nil
}

func (f *fakeStream) Skips(int32, uint64, int) (string, bool) { return "", false }

var _ slots.StreamPublisher = (*fakeStream)(nil)

// Into a stream, recover publishes only the rows the stream does not hold, each at a position
// just before the new slot's start, in order; and it fails, leaving the record alone, when the
// stream does not hold a row the broker confirmed (dropped as a duplicate).
func TestRecoverIntoStreamSkipsHeldRowsAndChecksTheBrokerStoredTheRest(t *testing.T) {
	db, conn, slot := setup(t)
	if _, err := ensure(t, db, conn, slot); err != nil {
		t.Fatal(err)
	}
	var ids []string
	rows, err := conn.Query(t.Context(), `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', g::text, 'order.created', '{}' FROM pg_catalog.generate_series(1, 10) g RETURNING id::text`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := slots.Drop(t.Context(), conn, slot); err != nil {
		t.Fatal(err)
	}
	holds := map[string]bool{ids[0]: true, ids[5]: true}
	recoverWith := func(f *fakeStream) (slots.Result, error) {
		t.Helper()
		rec, err := slots.OpenRecovery(t.Context(), slots.RecoverConfig{DatabaseURL: db, Slot: slot,
			Dial: func(context.Context) (slots.Publisher, error) { return f, nil }})
		if err != nil {
			t.Fatal(err)
		}
		defer rec.Close()
		g, err := rec.Inspect(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return rec.Recover(t.Context(), g)
	}

	dropped := newFakeStream(holds, map[string]bool{ids[7]: true})
	if _, err := recoverWith(dropped); err == nil || !strings.Contains(err.Error(), "confirmed 1 rows of the gap it did not store") {
		t.Fatalf("Recover with a row dropped: %v; want an error saying so", err)
	}
	if r, _, _ := registry.New(conn, "public").Get(t.Context(), slot); r.Origin == registry.OriginRecovered {
		t.Fatal("the record was reset although a row was not stored")
	}

	f := newFakeStream(holds, nil)
	res, err := recoverWith(f)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 10 || res.Held != 2 || res.Published != 8 || len(f.published) != 8 {
		t.Errorf("Result %+v, %d published; want 10 rows, 2 held, 8 published", res, len(f.published))
	}
	for _, id := range f.published {
		if holds[id] {
			t.Errorf("row %s published although the stream held it", id)
		}
	}
	for i, p := range f.positions {
		if p[0] != uint64(res.ConsistentPoint)-1 || p[1] != uint64(i) {
			t.Errorf("position %d: LSN %X index %d; want %X, %d", i, p[0], p[1], uint64(res.ConsistentPoint)-1, i)
		}
	}
	if f.bound == "" {
		t.Error("the stream publisher was not bound to the database")
	}
}

// The stream holds a message of this relay at a position past the new slot's start: the server
// is behind what the stream holds (restored from a backup, say). Recover refuses before it
// publishes, naming both positions, and leaves the record alone. (Before, every row was taken
// for stored and confirmed unsent; the read back then failed the recovery as rows the broker
// dropped as duplicates, and told the user to run recover again, which did the same.)
func TestRecoverIntoStreamRefusesAStreamAheadOfTheServer(t *testing.T) {
	db, conn, slot := setup(t)
	if _, err := ensure(t, db, conn, slot); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', g::text, 'order.created', '{}' FROM pg_catalog.generate_series(1, 5) g`); err != nil {
		t.Fatal(err)
	}
	if err := slots.Drop(t.Context(), conn, slot); err != nil {
		t.Fatal(err)
	}
	var (
		system   uint64
		timeline int32
		database string
	)
	if err := conn.QueryRow(t.Context(), `SELECT s.system_identifier, c.timeline_id, pg_catalog.current_database()
		FROM pg_catalog.pg_control_system() s, pg_catalog.pg_control_checkpoint() c`).Scan(&system, &timeline, &database); err != nil {
		t.Fatal(err)
	}
	rabbit := testenv.StartRabbitStream(t)
	cfg := streampub.Config{URIs: []string{rabbit.StreamURL()}, Stream: testenv.UniqueName("events"), Slot: slot}
	relay, err := streampub.Dial(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Bind(t.Context(), system, database); err != nil {
		t.Fatal(err)
	}
	relay.At(timeline, 0xFF00000000, 0) // far past this server's WAL
	if _, err := relay.Publish(t.Context(), &wire.Message{ID: uuid.New(), EventType: "e", Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(); err != nil {
		t.Fatal(err)
	}
	if c := <-relay.Confirms(); c.Err != nil {
		t.Fatal(c.Err)
	}
	_ = relay.Close()

	rec, err := slots.OpenRecovery(t.Context(), slots.RecoverConfig{DatabaseURL: db, Slot: slot,
		Dial: func(ctx context.Context) (slots.Publisher, error) { return streampub.Dial(ctx, cfg) }})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	g, err := rec.Inspect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	res, err := rec.Recover(t.Context(), g)
	if err == nil || !strings.Contains(err.Error(), "the stream is ahead of this server") ||
		!strings.Contains(err.Error(), "FF/0/0") {
		t.Fatalf("Recover: %v; want a refusal naming the stream's last position", err)
	}
	if res.Published != 0 {
		t.Errorf("%d rows published", res.Published)
	}
	if r, _, _ := registry.New(conn, "public").Get(t.Context(), slot); r.Origin == registry.OriginRecovered {
		t.Error("the record was reset")
	}
}
