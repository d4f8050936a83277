package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/migrations"
)

const sqlTimeout = 30 * time.Second

func connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

// Exec runs sql on the database at dbURL (URL() or a NewDatabase URL) and
// fails the test on error.
func (p *Postgres) Exec(tb TB, dbURL, sql string, args ...any) {
	tb.Helper()
	if err := execSQL(dbURL, sql, args...); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
}

// MigratedDatabase creates a database of the test's own (NewDatabase) with the outbox migrations
// of cfg applied, and returns its URL and a connection to it (closed at cleanup).
func (p *Postgres) MigratedDatabase(tb TB, cfg migrations.Config) (string, *pgx.Conn) {
	tb.Helper()
	db := p.NewDatabase(tb)
	conn := p.Conn(tb, db)
	ctx, cancel := context.WithTimeout(context.Background(), sqlTimeout)
	defer cancel()
	if _, err := migrations.Apply(ctx, conn, cfg); err != nil {
		tb.Fatalf("testenv: migrate: %v", err)
	}
	return db, conn
}

// Conn opens a connection to dbURL that is closed at cleanup.
func (p *Postgres) Conn(tb TB, dbURL string) *pgx.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sqlTimeout)
	defer cancel()
	conn, err := connect(ctx, dbURL)
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func execSQL(dbURL, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), sqlTimeout)
	defer cancel()
	conn, err := connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("exec %q: %w", truncate(sql, 80), err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// NewDatabase creates a database with a unique name and returns its URL.
// At cleanup it drops the replication slots in it (terminating their
// walsenders) and then the database itself, WITH (FORCE).
func (p *Postgres) NewDatabase(tb TB) string {
	tb.Helper()
	name := UniqueName("walbox_test")
	if err := execSQL(p.url, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("testenv: create database: %v", err)
	}
	tb.Cleanup(func() {
		if !p.external && !p.running() {
			return // stopped by the test; its directory goes away with it
		}
		if err := p.dropDatabase(name); err != nil {
			tb.Errorf("testenv: drop database %s: %v", name, err)
		}
	})
	return p.databaseURL(name)
}

const dropSlotsSQL = `
SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
 WHERE database = $1 AND active_pid IS NOT NULL`

const dropInactiveSlotsSQL = `
SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
 WHERE database = $1 AND NOT active`

func (p *Postgres) dropDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), sqlTimeout)
	defer cancel()
	conn, err := connect(ctx, p.url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if err := dropSlots(ctx, conn, name); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop: %w", err)
	}
	return nil
}

// dropSlots drops every slot of database name; a terminated walsender
// releases its slot asynchronously, hence the loop.
func dropSlots(ctx context.Context, conn *pgx.Conn, name string) error {
	for {
		if _, err := conn.Exec(ctx, dropSlotsSQL, name); err != nil {
			return fmt.Errorf("terminate slot users: %w", err)
		}
		// A slot that became active again in between fails with 55006: retry.
		if _, err := conn.Exec(ctx, dropInactiveSlotsSQL, name); err != nil && !isObjectInUse(err) {
			return fmt.Errorf("drop slots: %w", err)
		}
		var left int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE database = $1", name).Scan(&left); err != nil {
			return fmt.Errorf("count slots: %w", err)
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d slots still active: %w", left, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func isObjectInUse(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55006"
}

// OnStandby returns dbURL with standby's port, once the database can be reached there: replayed.
func OnStandby(tb TB, dbURL string, standby *Postgres) string {
	tb.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		tb.Fatalf("testenv: standby url: %v", err)
	}
	u.Host = fmt.Sprintf("%s:%d", u.Hostname(), standby.Port())
	deadline := time.Now().Add(scaled(time.Minute))
	for {
		c, err := pgx.Connect(context.Background(), u.String())
		if err == nil {
			_ = c.Close(context.Background())
			return u.String()
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testenv: the database on the standby: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
