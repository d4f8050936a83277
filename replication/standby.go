package replication

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/slots"
)

// errPromoted means the standby walbox streams from (--replication-url) was promoted, while
// --database-url still names another server.
var errPromoted = errors.New("replication server was promoted")

// inRecovery reports whether conn's server is a hot standby (PostgreSQL 14+ reports it).
func inRecovery(conn *pgconn.PgConn) bool { return conn.ParameterStatus("in_hot_standby") == "on" }

// checkReplicationServer refuses a standby as the replication server unless it is the replication URL.
// Otherwise the relay would retry for ever on the first primary-only query.
func checkReplicationServer(cfg *Config, conn *pgconn.PgConn) error {
	if cfg.ReplicationURL != "" || !inRecovery(conn) {
		return nil
	}
	return fatal(fmt.Errorf("%w: the database url points at a standby (in recovery). Point --database-url at the primary; "+
		"to decode on this standby (PostgreSQL 16+), give it as --replication-url as well", slots.ErrStandby))
}

// checkPrimary refuses a standby as the server of the record and the checks (--database-url).
func checkPrimary(conn *pgconn.PgConn) error {
	if !inRecovery(conn) {
		return nil
	}
	return fatal(fmt.Errorf("%w: --database-url points at a standby (in recovery), which cannot hold walbox's record. "+
		"Point it at the primary; --replication-url names the standby to stream from", slots.ErrStandby))
}

// connectSQL opens an ordinary connection to dsn, named walbox.
func connectSQL(ctx context.Context, dsn string) (*pgx.Conn, error) {
	pcfg, err := pgconnect.ParseConfig(dsn)
	if err != nil {
		return nil, fatal(errors.New("parse replication url: not a valid connection string or URL"))
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

// sameServer reports whether a and b are connected to the same server.
func sameServer(ctx context.Context, a, b *pgx.Conn) (bool, error) {
	ida, err := inspect.ServerIdentity(ctx, a)
	if err != nil {
		return false, err
	}
	idb, err := inspect.ServerIdentity(ctx, b)
	if err != nil {
		return false, fmt.Errorf("standby: %w", err)
	}
	return ida == idb, nil
}

// checkStandby returns the position up to which the replication server shares the primary's history.
// That is a standby's replay position, or no bound when the relay streams from the primary.
// A standby promoted later forks its WAL at a position no lower, so positions up to it are the primary's.
// A replication server that is no longer a standby, and not the primary either, was promoted.
// Its WAL past the fork is not the primary's, and rows the primary commits never reach its slot.
// That stops the relay.
func (w *watch) checkStandby(ctx context.Context) (pglogrepl.LSN, error) {
	if w.standby == nil || w.primaryToo {
		return pglogrepl.LSN(math.MaxUint64), nil
	}
	var recovery bool
	var replay *string
	if err := w.standby.QueryRow(ctx, "SELECT pg_catalog.pg_is_in_recovery(), pg_catalog.pg_last_wal_replay_lsn()::text").Scan(&recovery, &replay); err != nil {
		return 0, fmt.Errorf("read the standby's replay position: %w", err)
	}
	if !recovery {
		return 0, fatal(fmt.Errorf("%w: the --replication-url server is no longer a standby (promoted?) and is not the "+
			"--database-url server, which walbox records on: rows committed there no longer reach the slot walbox streams from. "+
			"Point --database-url at the promoted server if it is the primary now, or --replication-url at a standby of the primary",
			errPromoted))
	}
	if replay == nil {
		return 0, nil
	}
	return pglogrepl.ParseLSN(*replay)
}
