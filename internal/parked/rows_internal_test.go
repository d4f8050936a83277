package parked

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/wire"
)

// A parked row is read back from its outbox table by its id. An id the table's id column cannot
// hold, an id of no row and a table that is no outbox table are each simply not found.
func TestRowReadByItsID(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	conn := pg.Conn(t, pg.NewDatabase(t))
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, conn, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	if _, err := conn.Exec(ctx, `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload, headers)
		VALUES ($1, 'order', '7', 'order.created', '{"n": 1}', '{"trace": "t"}')`, id); err != nil {
		t.Fatal(err)
	}
	r := newRows(conn, []wire.Mapping{{Table: wire.DefaultTable}})
	m, found, err := r.read(ctx, "public.outbox", id, time.Time{})
	if err != nil || !found || m.AMQPMessageID() != id || m.EventType != "order.created" || m.Headers["trace"] != "t" {
		t.Fatalf("read = %+v, %v, %v; want the row", m, found, err)
	}
	for _, c := range []struct{ table, id string }{
		{"public.outbox", "not-a-uuid"}, {"public.outbox", uuid.NewString()}, {"public.other", id},
	} {
		if _, found, err := r.read(ctx, c.table, c.id, time.Time{}); found || err != nil {
			t.Errorf("read(%s, %s) = found %v, %v; want not found", c.table, c.id, found, err)
		}
	}
	if _, found, err := newRows(nil, nil).read(ctx, "public.outbox", id, time.Time{}); found || err != nil {
		t.Errorf("without a database: found %v, %v; want not found", found, err)
	}
}

// A replay decides whether a parked message is due by the database's clock, as the relay does. A
// database that cannot tell the time stops the replay: the host's clock may run ahead.
func TestReplayIsDueByTheDatabaseClock(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	conn := pg.Conn(t, pg.NewDatabase(t))
	ctx := context.Background()
	var now time.Time
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.clock_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	r := newRows(conn, nil)
	for _, c := range []struct {
		at    time.Time
		later bool
	}{{now.Add(time.Hour), true}, {now.Add(-time.Second), false}, {time.Time{}, false}} {
		var o Outcome
		later, err := notYet(ctx, r, &wire.Message{DeliverAt: c.at}, &o)
		if err != nil || later != c.later || later != (o.Action == leftParked) {
			t.Errorf("due at %v: later %v (%q), %v; want %v", c.at, later, o.Action, err, c.later)
		}
	}
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := notYet(ctx, r, &wire.Message{DeliverAt: now.Add(time.Hour)}, &Outcome{}); err == nil {
		t.Error("the database's clock could not be read, yet the replay went on by the host's")
	}
}
