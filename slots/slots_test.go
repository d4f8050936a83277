package slots_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/wire"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// setup returns a database with the outbox migrated, a connection to it and a fresh slot name.
func setup(t *testing.T) (db string, conn *pgx.Conn, slot string) {
	t.Helper()
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db = pg.NewDatabase(t)
	conn = pg.Conn(t, db)
	if _, err := migrations.Apply(t.Context(), conn, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	return db, conn, testenv.UniqueName("slot")
}

func ensure(t *testing.T, db string, conn *pgx.Conn, slot string) (bool, error) {
	t.Helper()
	return slots.EnsureSlot(t.Context(), db, slot, "walbox", []wire.Table{wire.DefaultTable}, registry.New(conn, "public"))
}

func TestEnsureSlotCreatesAndRecordsOnce(t *testing.T) {
	db, conn, slot := setup(t)
	for i, want := range []bool{true, false} {
		created, err := ensure(t, db, conn, slot)
		if err != nil {
			t.Fatal(err)
		}
		if created != want {
			t.Fatalf("call %d: created = %v, want %v", i+1, created, want)
		}
	}
	rec, ok, err := registry.New(conn, "public").Get(t.Context(), slot)
	if err != nil || !ok {
		t.Fatalf("record of %s: %v, %v", slot, ok, err)
	}
	info, err := inspect.ReadSlot(t.Context(), conn, slot)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Origin != registry.OriginCreated || rec.CreatedLSN == 0 || rec.ConfirmedLSN != rec.CreatedLSN {
		t.Errorf("record = %+v, want origin created, confirmed at the consistent point", rec)
	}
	if got, want := info.ConfirmedFlush, rec.ConfirmedLSN; got > want {
		t.Errorf("slot at %s, ahead of its record %s", got, want)
	}
}

func TestEnsureSlotDoesNotRecreateADroppedSlot(t *testing.T) {
	db, conn, slot := setup(t)
	if _, err := ensure(t, db, conn, slot); err != nil {
		t.Fatal(err)
	}
	if err := slots.Drop(t.Context(), conn, slot); err != nil {
		t.Fatal(err)
	}
	if _, err := ensure(t, db, conn, slot); !errors.Is(err, slots.ErrSlotMissing) {
		t.Fatalf("EnsureSlot after the recorded slot was dropped: %v, want ErrSlotMissing", err)
	}
	info, err := inspect.ReadSlot(t.Context(), conn, slot)
	if err != nil || info.Exists {
		t.Fatalf("slot %s exists = %v (%v), want it left missing", slot, info.Exists, err)
	}
	if err := slots.Drop(t.Context(), conn, slot); !errors.Is(err, slots.ErrSlotMissing) {
		t.Fatalf("Drop of a missing slot: %v, want ErrSlotMissing", err)
	}
}

func TestDropRefusesASlotInUse(t *testing.T) {
	db, conn, slot := setup(t)
	if _, err := ensure(t, db, conn, slot); err != nil {
		t.Fatal(err)
	}
	stream(t, db, slot)
	err := slots.Drop(t.Context(), conn, slot)
	if !errors.Is(err, slots.ErrSlotActive) {
		t.Fatalf("Drop of a slot in use: %v, want ErrSlotActive", err)
	}
	info, err := inspect.ReadSlot(t.Context(), conn, slot)
	if err != nil || !info.Exists {
		t.Fatalf("slot %s exists = %v (%v), want it kept", slot, info.Exists, err)
	}
}

// stream starts streaming from slot on a connection of its own, until the test ends, and returns
// that connection.
func stream(t *testing.T, db, slot string) *pgconn.PgConn {
	t.Helper()
	repl := replConn(t, db)
	err := pglogrepl.StartReplication(t.Context(), repl, slot, 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication, PluginArgs: []string{"proto_version '1'", `publication_names '"walbox"'`},
	})
	if err != nil {
		t.Fatal(err)
	}
	return repl
}

// replConn opens a logical replication connection to db until the test ends.
func replConn(t *testing.T, db string) *pgconn.PgConn {
	t.Helper()
	cfg, err := slots.ConnConfig(db)
	if err != nil {
		t.Fatal(err)
	}
	repl, err := pgconn.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = repl.Close(context.Background()) })
	return repl
}
