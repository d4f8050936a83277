package checker

import (
	"testing"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
)

// A commit whose outcome is unknown is settled by looking its ids up: all present means
// committed, none means not, and a transaction found half there is an error.
func TestFlushResolvesUnknownCommits(t *testing.T) {
	if testenv.Short() {
		t.Skip("needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	conn := pg.Conn(t, db)
	if _, err := migrations.Apply(t.Context(), conn, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(WriterConfig{DatabaseURL: db, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	// Two transactions as if their COMMIT had gone unanswered: the first did commit (its rows
	// are in the table), the second did not.
	landed, vanished := w.next(3), w.next(2)
	for _, r := range landed {
		pg.Exec(t, db, `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1, 'checker', $2, 'checker.event', '{}')`, r.ID, r.Aggregate)
	}
	w.pending = [][]Row{landed, vanished}
	w.stats.Unknown = 2
	if st := w.Stats(); st.Unresolved != 5 {
		t.Fatalf("Unresolved = %d before Flush, want 5", st.Unresolved)
	}
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := w.Committed()
	if len(got) != 3 || got[0] != landed[0] || got[2] != landed[2] {
		t.Fatalf("Committed = %+v, want the 3 rows that landed", got)
	}
	st := w.Stats()
	if st.Resolved != 1 || st.Unresolved != 0 || st.Rows != 3 || st.Transactions != 1 {
		t.Fatalf("Stats = %+v, want 1 resolved transaction of 3 rows and nothing unresolved", st)
	}

	// Half a transaction in the table is an anomaly, not a verdict.
	half := w.next(2)
	pg.Exec(t, db, `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ($1, 'checker', 'x', 'checker.event', '{}')`, half[0].ID)
	w.pending = [][]Row{half}
	if err := w.ensureConn(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := w.resolvePending(t.Context()); err == nil {
		t.Fatal("resolvePending accepted a transaction found half committed")
	}
	if st := w.Stats(); st.Unresolved != 2 {
		t.Fatalf("Unresolved = %d after a failed resolution, want 2", st.Unresolved)
	}
}
