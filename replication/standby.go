package replication

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/slots"
)

// ErrStandby means a server walbox needs to be the primary is a standby.
var ErrStandby = slots.ErrStandby

// inRecovery reports whether conn's server is a hot standby (PostgreSQL 14+ reports it).
func inRecovery(conn *pgconn.PgConn) bool { return conn.ParameterStatus("in_hot_standby") == "on" }

// checkReplicationServer refuses a standby as the replication server unless it was given as the
// replication URL: without, the relay would retry for ever on the first primary-only query.
func checkReplicationServer(cfg *Config, conn *pgconn.PgConn) error {
	if cfg.ReplicationURL != "" || !inRecovery(conn) {
		return nil
	}
	return fatal(fmt.Errorf("%w: the database url points at a standby (in recovery). Point --database-url at the primary; "+
		"to decode on this standby (PostgreSQL 16+), give it as --replication-url as well", ErrStandby))
}

// checkPrimary refuses a standby as the server of the record and the checks (--database-url).
func checkPrimary(conn *pgconn.PgConn) error {
	if !inRecovery(conn) {
		return nil
	}
	return fatal(fmt.Errorf("%w: --database-url points at a standby (in recovery), which cannot hold walbox's record. "+
		"Point it at the primary; --replication-url names the standby to stream from", ErrStandby))
}

// connectSQL opens an ordinary connection to dsn, named walbox.
func connectSQL(ctx context.Context, dsn string) (*pgx.Conn, error) {
	pcfg, err := pgx.ParseConfig(dsn)
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
