package replication_test

import (
	"context"
	"errors"
	"net/url"
	"testing"

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

	u, err := url.Parse(e.db)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User("peek_relay")
	q := u.Query()
	q.Set("replication", "database")
	u.RawQuery = q.Encode()
	conn, err := pgconn.Connect(t.Context(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

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
