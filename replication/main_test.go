package replication_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/wire"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// env is one test's database with the outbox migrated and a slot created, and a relay on it.
type env struct {
	t      *testing.T
	pg     *testenv.Postgres
	db     string
	conn   *pgx.Conn
	slot   string
	broker *fakeBroker
	cancel context.CancelFunc
	done   chan error
	relay  *replication.Relay
}

func setup(t *testing.T, pg *testenv.Postgres, broker *fakeBroker) *env {
	t.Helper()
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	db := pg.NewDatabase(t)
	e := &env{t: t, pg: pg, db: db, conn: pg.Conn(t, db), slot: testenv.UniqueName("slot"), broker: broker}
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, e.conn, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := slots.EnsureSlot(ctx, db, e.slot, "walbox", []wire.Table{wire.DefaultTable}, registry.New(e.conn, "public")); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) config() replication.Config {
	return replication.Config{
		DatabaseURL:     e.db,
		Slot:            e.slot,
		StatusInterval:  50 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second,
		MaxBackoff:      200 * time.Millisecond,
		StandbyRetry:    100 * time.Millisecond,
		Dial:            e.broker.dial,
		Logger:          slog.New(slog.NewTextHandler(testWriter{e.t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// start runs a relay in the background; edit may change its config.
func (e *env) start(edit func(*replication.Config)) {
	e.t.Helper()
	cfg := e.config()
	if edit != nil {
		edit(&cfg)
	}
	r, err := replication.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.relay, e.cancel, e.done = r, cancel, make(chan error, 1)
	go func() { e.done <- r.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-e.done:
		case <-time.After(20 * time.Second):
			e.t.Error("relay did not stop within 20s")
		}
	})
}

// stop cancels the relay and returns Run's result.
func (e *env) stop() error {
	e.t.Helper()
	e.cancel()
	select {
	case err := <-e.done:
		e.done <- err // for the cleanup
		return err
	case <-time.After(20 * time.Second):
		e.t.Fatal("relay did not stop within 20s")
		return nil
	}
}

// wait returns Run's result once it ends by itself.
func (e *env) wait(timeout time.Duration) error {
	e.t.Helper()
	select {
	case err := <-e.done:
		e.done <- err
		return err
	case <-time.After(timeout):
		e.t.Fatalf("relay still running after %v", timeout)
		return nil
	}
}

// insertTx commits one transaction of n outbox rows with the given event type.
// It returns their ids, and a WAL position that lies before the transaction's commit record.
// A slot confirmed past it has confirmed this transaction.
func (e *env) insertTx(n int, eventType string) ([]uuid.UUID, pglogrepl.LSN) {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.conn.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.New()
		if _, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1, 'order', $2, $3, $4)`, ids[i], fmt.Sprint(i), eventType, fmt.Sprintf(`{"n": %d}`, i)); err != nil {
			e.t.Fatal(err)
		}
	}
	var before pglogrepl.LSN
	if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()").Scan(&before); err != nil {
		e.t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
	return ids, before
}

// dropSlot drops the slot, terminating the walsender that holds it as often as the relay takes
// it again.
func (e *env) dropSlot() {
	e.t.Helper()
	ctx := context.Background()
	waitFor(e.t, 10*time.Second, "slot dropped", func() bool {
		_, err := e.conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.slot)
		if err != nil {
			e.t.Fatal(err)
		}
		_, err = e.conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", e.slot)
		return err == nil
	})
}

// slotLSN returns the slot's confirmed_flush_lsn.
func (e *env) slotLSN() pglogrepl.LSN {
	e.t.Helper()
	var lsn pglogrepl.LSN
	err := e.conn.QueryRow(context.Background(),
		"SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1", e.slot).Scan(&lsn)
	if errors.Is(err, pgx.ErrNoRows) {
		e.t.Fatalf("slot %s is gone", e.slot)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return lsn
}

// currentLSN returns the server's current WAL insert position.
func (e *env) currentLSN() pglogrepl.LSN {
	e.t.Helper()
	var lsn pglogrepl.LSN
	if err := e.conn.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()").Scan(&lsn); err != nil {
		e.t.Fatal(err)
	}
	return lsn
}

// staysTrue checks cond repeatedly for d and fails if it is ever false.
func staysTrue(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if err := cond(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
