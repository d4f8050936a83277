package slots_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/wire"
)

// A slot created on a standby that lags the primary starts where the standby has replayed to,
// before rows the primary already committed. Its record's horizon must not exclude those rows,
// so that walbox recover finds them should the slot be lost: it is read on the standby. The old
// code read it on the primary, past those rows.
func TestEnsureSlotOnALaggingStandbyRecordsItsHorizon(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL 17 and a standby")
	}
	primary := testenv.StartPostgres(t, testenv.PGVersion(17))
	testenv.RequireOwn(t, primary)
	standby := testenv.StartStandby(t, primary, "lagging", testenv.WithSetting("hot_standby_feedback", "on"))
	db, conn := primary.MigratedDatabase(t, migrations.Config{})
	ctx := t.Context()
	replURL := onPort(t, db, standby.Port())
	sconn := waitConn(t, replURL)

	// The standby stops replaying; the primary logs a standby snapshot (where the slot will be
	// consistent), then commits rows the standby has not replayed yet.
	if _, err := sconn.Exec(ctx, "SELECT pg_wal_replay_pause()"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "replay paused", func() bool {
		var state string
		return sconn.QueryRow(ctx, "SELECT pg_get_wal_replay_pause_state()").Scan(&state) == nil && state == "paused"
	})
	var before pglogrepl.LSN
	if err := conn.QueryRow(ctx, "SELECT pg_log_standby_snapshot()::text").Scan(&before); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := conn.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
			VALUES ('order', $1, 'order.created', '{}')`, strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}

	slot := testenv.UniqueName("lag")
	done := make(chan error, 1)
	go func() {
		_, err := slots.EnsureSlot(context.Background(), db, slot, "walbox", []wire.Table{wire.DefaultTable},
			registry.New(conn, "public"), slots.WithReplicationURL(replURL))
		done <- err
	}()
	waitUntil(t, "slot creation to begin on the standby", func() bool {
		var n int
		return sconn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n) == nil && n == 1
	})
	if _, err := sconn.Exec(ctx, "SELECT pg_wal_replay_resume()"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the slot was not created within 2 minutes")
	}

	rec, ok, err := registry.New(conn, "public").Get(ctx, slot)
	if err != nil || !ok {
		t.Fatalf("record of %s: %v, %v", slot, ok, err)
	}
	if rec.CreatedLSN > before {
		t.Fatalf("the slot starts at %s, after the rows (%s): the standby did not lag, and the test proves nothing", rec.CreatedLSN, before)
	}
	rows, err := conn.Query(ctx, "SELECT xmin::text::bigint FROM outbox")
	if err != nil {
		t.Fatal(err)
	}
	xmins, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range xmins {
		if uint64(x) < rec.ConfirmedXmin%(1<<32) {
			t.Errorf("a row committed after the slot's start %s has transaction %d, below the recorded horizon %d: recover would miss it",
				rec.CreatedLSN, x, rec.ConfirmedXmin)
		}
	}
	_ = slots.Drop(context.Background(), sconn, slot)
}

// onPort returns the database URL u with its port replaced.
func onPort(t *testing.T, u string, port int) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p.Host = fmt.Sprintf("%s:%d", p.Hostname(), port)
	return p.String()
}

// waitConn connects to u once the database exists there (on a standby, once replayed).
func waitConn(t *testing.T, u string) *pgx.Conn {
	t.Helper()
	var conn *pgx.Conn
	waitUntil(t, "the database on the standby", func() bool {
		c, err := pgx.Connect(t.Context(), u)
		if err != nil {
			return false
		}
		conn = c
		return true
	})
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// waitUntil polls cond until it holds, for up to two minutes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
