package inspect_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/wire"
)

func setup(t *testing.T) (*testenv.Postgres, string, *pgx.Conn) {
	t.Helper()
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	conn := pg.Conn(t, db)
	if _, err := migrations.Apply(t.Context(), conn, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	return pg, db, conn
}

// Coverage follows what the publication holds, not the table's name: a table swapped in by renames
// is not covered, and the error names the old table it still holds.
func TestCoverageSeesATableSwap(t *testing.T) {
	_, _, conn := setup(t)
	ctx := t.Context()
	tables := []wire.Table{wire.DefaultTable}
	c, err := inspect.ReadCoverage(ctx, conn, "walbox", tables)
	if err != nil || c.Err() != nil || c.WAL == 0 || c.Xmin == 0 {
		t.Fatalf("before the swap: %+v, %v, %v", c, err, c.Err())
	}
	for _, sql := range []string{"CREATE TABLE outbox_new (LIKE outbox INCLUDING ALL)",
		"ALTER TABLE outbox RENAME TO outbox_old", "ALTER TABLE outbox_new RENAME TO outbox"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	c, err = inspect.ReadCoverage(ctx, conn, "walbox", tables)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Err(); !errors.Is(err, inspect.ErrNotCovered) || !strings.Contains(err.Error(), "public.outbox_old") {
		t.Fatalf("after the swap: %v, want ErrNotCovered naming public.outbox_old", err)
	}
}

func TestCoverageErrors(t *testing.T) {
	_, _, conn := setup(t)
	ctx := t.Context()
	read := func() error {
		t.Helper()
		c, err := inspect.ReadCoverage(ctx, conn, "walbox", []wire.Table{wire.DefaultTable})
		if err != nil {
			t.Fatal(err)
		}
		return c.Err()
	}
	for _, tc := range []struct {
		sql  string
		want error
	}{
		{"ALTER PUBLICATION walbox SET (publish = 'update')", inspect.ErrNotCovered},
		{"ALTER PUBLICATION walbox SET (publish = 'insert'); ALTER PUBLICATION walbox DROP TABLE outbox", inspect.ErrNotCovered},
		{"DROP PUBLICATION walbox", inspect.ErrNoPublication},
	} {
		if _, err := conn.Exec(ctx, tc.sql); err != nil {
			t.Fatal(err)
		}
		if err := read(); !errors.Is(err, tc.want) {
			t.Errorf("after %s: %v, want %v", tc.sql, err, tc.want)
		}
	}
}

// A role with nothing but LOGIN REPLICATION reads the same columns and slot as the owner.
func TestLeastPrivilegeRoleSeesWhatRunNeeds(t *testing.T) {
	pg, db, conn := setup(t)
	ctx := t.Context()
	role := strings.ReplaceAll(testenv.UniqueName("relay"), "-", "_")
	// A password, for servers that ask for one (the harness's own trusts local connections).
	pg.Exec(t, db, "CREATE ROLE "+role+" LOGIN REPLICATION PASSWORD '"+role+"'")
	t.Cleanup(func() { pg.Exec(t, pg.URL(), "DROP ROLE IF EXISTS "+role) })
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, role)
	relay := pg.Conn(t, u.String())
	for _, q := range []inspect.Querier{conn, relay} {
		cols, err := inspect.CheckTable(ctx, q, wire.Mapping{Table: wire.DefaultTable})
		if err != nil || cols["payload"] != "jsonb" {
			t.Errorf("CheckTable: %v, %v", cols, err)
		}
	}
	if _, err := conn.Exec(ctx, "ALTER TABLE outbox RENAME COLUMN payload TO body"); err != nil {
		t.Fatal(err)
	}
	if _, err := inspect.CheckTable(ctx, relay, wire.Mapping{Table: wire.DefaultTable}); err == nil || !strings.Contains(err.Error(), `"payload"`) {
		t.Errorf("CheckTable after a rename: %v, want an error naming payload", err)
	}
	if _, err := inspect.CheckTable(ctx, relay, wire.Mapping{Table: wire.DefaultTable, Payload: "body"}); err != nil {
		t.Errorf("CheckTable with the mapping: %v", err)
	}
	if _, err := inspect.CheckTable(ctx, relay, wire.Mapping{Table: wire.Table{Schema: "public", Name: "nope"}}); !errors.Is(err, inspect.ErrNoTable) {
		t.Errorf("CheckTable of a missing table: %v, want ErrNoTable", err)
	}
}

func TestReadSlot(t *testing.T) {
	_, _, conn := setup(t)
	ctx := context.Background()
	name := strings.ReplaceAll(testenv.UniqueName("slot"), "-", "_")
	s, err := inspect.ReadSlot(ctx, conn, name)
	if err != nil || s.Exists || s.CurrentWAL == 0 {
		t.Fatalf("missing slot: %+v, %v", s, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", name); err != nil {
		t.Fatal(err)
	}
	s, err = inspect.ReadSlot(ctx, conn, name)
	if err != nil || !s.Exists || s.Plugin != "pgoutput" || s.ConfirmedFlush == 0 || s.LagBytes == nil || s.RetainedBytes == nil {
		t.Fatalf("slot: %+v, %v", s, err)
	}
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if err := s.Usable(db); err != nil {
		t.Errorf("Usable(%s) = %v", db, err)
	}
	if err := s.Usable("other"); !errors.Is(err, inspect.ErrSlotMismatch) {
		t.Errorf("Usable(other) = %v, want ErrSlotMismatch", err)
	}
}
