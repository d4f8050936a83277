package bench

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
)

// pollTable is the polling relay's table: the outbox's columns, an identity column to order by,
// published_at, and a partial index over the rows still to publish, as the polling relay's
// proponents describe it.
const pollTable = "outbox_polling"

const pollTableDDL = `
CREATE TABLE outbox_polling (
    seq            bigint      GENERATED ALWAYS AS IDENTITY,
    id             uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text        NOT NULL,
    payload        jsonb       NOT NULL,
    headers        jsonb       NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT now(),
    published_at   timestamptz
) WITH (autovacuum_enabled = false);
CREATE INDEX outbox_polling_unpublished ON outbox_polling (seq) WHERE published_at IS NULL`

// Autovacuum is off on the bench tables so that no vacuum falls into a measured window; the
// polling relay's dead tuples are vacuumed after its run, and that VACUUM's WAL is reported.
const walboxTableSetup = `ALTER TABLE public.outbox SET (autovacuum_enabled = false)`

// sqlTimeout bounds the administrative statements.
const sqlTimeout = 2 * time.Minute

// execSQL runs statements on dbURL in one connection.
func execSQL(ctx context.Context, dbURL string, sqls ...string) error {
	ctx, cancel := context.WithTimeout(ctx, sqlTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	for _, sql := range sqls {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("exec %.40q: %w", sql, err)
		}
	}
	return nil
}

// withDatabase returns adminURL with its database replaced by name.
func withDatabase(adminURL, name string) (string, error) {
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", fmt.Errorf("parse database url: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// createDatabase creates database name and returns its URL.
func createDatabase(ctx context.Context, adminURL, name string) (string, error) {
	if err := execSQL(ctx, adminURL, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database: %w", err)
	}
	return withDatabase(adminURL, name)
}

// dropDatabase drops database name and its replication slots.
func dropDatabase(ctx context.Context, adminURL, name string) error {
	ctx, cancel := context.WithTimeout(ctx, sqlTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("drop database: connect: %w", err)
	}
	defer conn.Close(context.Background())
	for {
		_, err := conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE database = $1 AND active_pid IS NOT NULL`, name)
		if err == nil {
			_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
				WHERE database = $1 AND NOT active`, name)
		}
		var left int
		if err == nil {
			err = conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE database = $1", name).Scan(&left)
		}
		if err == nil && left == 0 {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("drop slots of %s: %w", name, ctx.Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// walLSN returns the server's current WAL insert position in bytes.
func walLSN(ctx context.Context, conn *pgx.Conn) (int64, error) {
	var lsn int64
	if err := conn.QueryRow(ctx, "SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint").Scan(&lsn); err != nil {
		return 0, fmt.Errorf("read wal position: %w", err)
	}
	return lsn, nil
}

// serverVersion returns PostgreSQL's server_version.
func serverVersion(ctx context.Context, dbURL string) string {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return "unknown"
	}
	defer conn.Close(context.Background())
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "unknown"
	}
	return v
}
