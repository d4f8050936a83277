package replication_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/wire"
)

// peeked is a row PeekSkipped handed over, with its position.
type peeked struct {
	lsn   uint64
	index int
	id    string
}

// PeekSkipped reads the rows a relay would publish, with the relay's positions, up to the given
// commit LSN, as a role with LOGIN REPLICATION only (walbox run's least role). A row due later is
// not among them. It leaves the slot where it was, and refuses a slot a relay streams from.
func TestPeekSkippedAsTheRelaysLeastRole(t *testing.T) {
	pg := testenv.StartPostgres(t)
	testenv.RequireOwn(t, pg)
	e := setup(t, pg, newFakeBroker(true))
	pg.Exec(t, pg.URL(), "CREATE ROLE peek_relay LOGIN REPLICATION")
	first, _ := e.insertTx(3, "first")
	second, _ := e.insertTx(2, "second")
	// A row due later is scheduled or parked, never published in commit order: not handed over.
	if _, err := e.conn.Exec(t.Context(), `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, deliver_at)
		VALUES (gen_random_uuid(), 'order', '1', 'later', '{}', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	before := e.slotLSN()

	conn := e.replicationConn(url.User("peek_relay"))

	peek := func(upto uint64) ([]peeked, error) {
		var got []peeked
		err := replication.PeekSkipped(t.Context(), conn, replication.PeekConfig{Slot: e.slot, Publication: "walbox", Upto: upto},
			func(_ int32, lsn uint64, index int, m *wire.Message) (bool, error) {
				if lsn > upto {
					return true, nil
				}
				got = append(got, peeked{lsn: lsn, index: index, id: m.ID.String()})
				return false, nil
			})
		return got, err
	}
	all, err := peek(uint64(e.currentLSN()))
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]string{}, idStrings(first)...), idStrings(second)...)
	if len(all) != len(want) {
		t.Fatalf("peeked %d rows, want %d: %v", len(all), len(want), all)
	}
	for i, p := range all {
		wantIndex := i
		if i >= len(first) {
			wantIndex = i - len(first)
		}
		if p.id != want[i] || p.index != wantIndex {
			t.Errorf("row %d: id %s index %d, want %s index %d", i, p.id, p.index, want[i], wantIndex)
		}
	}
	if all[0].lsn == all[len(all)-1].lsn {
		t.Errorf("both transactions at commit LSN %X", all[0].lsn)
	}
	// Up to the first transaction's commit: its rows only.
	part, err := peek(all[0].lsn)
	if err != nil {
		t.Fatal(err)
	}
	if len(part) != len(first) {
		t.Errorf("peeked %d rows up to the first commit, want %d", len(part), len(first))
	}
	if got := e.slotLSN(); got != before {
		t.Errorf("the slot moved from %s to %s", before, got)
	}

	e.start(nil)
	e.broker.waitPublished(t, len(want))
	if _, err := peek(uint64(e.currentLSN())); !errors.Is(err, replication.ErrSlotActive) {
		t.Errorf("peek of a slot a relay streams from: %v, want ErrSlotActive", err)
	}
}

func idStrings[T interface{ String() string }](ids []T) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

// A peek whose context ends while the server decodes stops the server and frees the slot before
// it returns. The server holds the slot for the whole peek and sends no row before it decoded
// them all. It does not notice a client gone: left running, it would hold the slot, and keep
// walbox run waiting as a standby, for as long as the span takes to decode. A relay started
// during the peek waits as a standby, and streams once the peek is over.
func TestPeekEndedWhileTheServerDecodesFreesTheSlot(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	e := setup(t, pg, newFakeBroker(true))
	if _, err := e.conn.Exec(t.Context(), `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
		SELECT pg_catalog.gen_random_uuid(), 'order', i::text, 'big', '{}' FROM pg_catalog.generate_series(1, 300000) i`); err != nil {
		t.Fatal(err)
	}
	upto := uint64(e.currentLSN())
	conn := e.replicationConn(nil)
	active := func() bool {
		var held bool
		if err := e.conn.QueryRow(context.Background(), "SELECT active FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
			e.slot).Scan(&held); err != nil {
			t.Error(err)
		}
		return held
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var err error
	rows := 0
	done := make(chan error, 1)
	go func() {
		done <- replication.PeekSkipped(ctx, conn, replication.PeekConfig{Slot: e.slot, Publication: "walbox", Upto: upto},
			func(int32, uint64, int, *wire.Message) (bool, error) {
				rows++
				return false, nil
			})
	}()
	waitFor(t, time.Minute, "the peek to hold the slot", active)
	e.start(nil)
	waitFor(t, time.Minute, "the relay to wait as a standby", func() bool {
		return replication.State(e.relay.Stats().State.Load()) == replication.StateStandby
	})
	cancel()
	err = <-done
	if rows > 0 {
		t.Skipf("the server decoded %d rows before the peek's context ended; nothing to check", rows)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("peek ended by its context: %v, want context.Canceled", err)
	}
	var byPeek bool
	if err := e.conn.QueryRow(context.Background(), "SELECT active_pid IS NOT DISTINCT FROM $2 FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
		e.slot, int32(conn.PID())).Scan(&byPeek); err != nil {
		t.Fatal(err)
	}
	if byPeek {
		t.Errorf("slot %s is still held by the peek's server process after the peek returned: it goes on decoding", e.slot)
	}
	e.broker.waitPublished(t, 1)
}

// replicationConn connects to the database as a replication connection, as user if not nil. The
// test's cleanup closes it.
func (e *env) replicationConn(user *url.Userinfo) *pgconn.PgConn {
	e.t.Helper()
	u, err := url.Parse(e.db)
	if err != nil {
		e.t.Fatal(err)
	}
	if user != nil {
		u.User = user
	}
	q := u.Query()
	q.Set("replication", "database")
	u.RawQuery = q.Encode()
	conn, err := pgconn.Connect(e.t.Context(), u.String())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
