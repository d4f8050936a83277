package slots

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/internal/pgconnect"
)

// ErrStandby means a server walbox needs to be the primary is a standby.
var ErrStandby = errors.New("server is a standby")

// inRecovery reports whether conn's server is a hot standby (PostgreSQL 14+ reports it).
func inRecovery(conn *pgconn.PgConn) bool { return conn.ParameterStatus("in_hot_standby") == "on" }

// checkPrimary refuses a standby as the server of the record and the checks (--database-url).
func checkPrimary(conn *pgconn.PgConn) error {
	if !inRecovery(conn) {
		return nil
	}
	return fmt.Errorf("%w: --database-url points at a standby (in recovery), which cannot hold walbox's record. "+
		"Point it at the primary; --replication-url names the standby to stream from", ErrStandby)
}

// errStandbyAsPrimary refuses a standby given as the database url alone.
func errStandbyAsPrimary() error {
	return fmt.Errorf("%w: the database url points at a standby (in recovery). Point --database-url at the primary; "+
		"to decode on this standby (PostgreSQL 16+), give it as --replication-url as well", ErrStandby)
}

// connectSQL opens an ordinary connection to dsn, named walbox.
func connectSQL(ctx context.Context, dsn string) (*pgx.Conn, error) {
	pcfg, err := pgconnect.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("parse replication url: not a valid connection string or URL")
	}
	if pcfg.RuntimeParams["application_name"] == "" {
		pcfg.RuntimeParams["application_name"] = "walbox"
	}
	conn, err := pgx.ConnectConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the standby: %w", err)
	}
	return conn, nil
}

// snapshotInterval is how often slot creation on a standby asks the primary for a standby
// snapshot.
const snapshotInterval = 500 * time.Millisecond

// whileCreating runs create. The replication server may be a standby. Then, until create returns,
// it asks the primary to log a standby snapshot every snapshotInterval. It asks through primary,
// with pg_log_standby_snapshot (PostgreSQL 16+). Creating a slot on a standby waits for such a
// snapshot. The primary otherwise writes one only every 15 seconds, and only when it is busy. The
// function create does not use primary meanwhile.
func whileCreating(ctx context.Context, conn *pgconn.PgConn, primary Execer, create func() error) error {
	if !inRecovery(conn) {
		return create()
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(snapshotInterval)
		defer t.Stop()
		for {
			// A role that may not call it leaves the wait to the primary's own snapshots.
			if _, err := primary.Exec(ctx, "SELECT pg_log_standby_snapshot()"); err != nil {
				return
			}
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	err := create()
	close(done)
	<-stopped
	return err
}

// standbyHorizon reads, on a hot standby, the xmin horizon of a snapshot of the WAL it has replayed
// so far. A slot created on the standby after this starts at or after that position. The standby
// only replays forward. So any transaction that commits after the slot's consistent point has an id
// no lower. The primary's horizon is no such bound when the standby lags. It is read at a later
// position than the slot's start.
func standbyHorizon(ctx context.Context, standby *pgx.Conn) (uint64, error) {
	var xmin string
	err := standby.QueryRow(ctx, "SELECT pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::pg_catalog.text").Scan(&xmin)
	if err != nil {
		return 0, fmt.Errorf("read the standby's transaction horizon: %w", err)
	}
	x, err := strconv.ParseUint(xmin, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read the standby's transaction horizon %q: %w", xmin, err)
	}
	return x, nil
}
