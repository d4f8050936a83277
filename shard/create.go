package shard

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/wire"
)

// lockKey serialises walbox's changes to shard publications ("wbshrd" in ASCII).
const lockKey = 0x776273687264

// CreatePublications creates the publications of set that do not exist yet, in one transaction.
// Each publishes the inserts of table with its shard's row filter. So a set is created whole or not
// at all. It returns the names it created. The slots come afterwards: pgoutput reads the
// publications as of the WAL it decodes.
func CreatePublications(ctx context.Context, conn *pgx.Conn, table wire.Table, set Set) ([]string, error) {
	if err := set.Validate(); err != nil {
		return nil, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock($1)", int64(lockKey)); err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	var created []string
	for k := range set.N {
		name := set.PublicationName(k)
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", name).Scan(&exists); err != nil {
			return nil, fmt.Errorf("look up publication %s: %w", name, err)
		}
		if exists {
			continue // checked against the table and the filter below, with the others
		}
		sql := "CREATE PUBLICATION " + pgx.Identifier{name}.Sanitize() + " FOR TABLE " + table.Quoted()
		if f := set.Filter(k); f != "" {
			sql += " WHERE " + f
		}
		if _, err := tx.Exec(ctx, sql+" WITH (publish = 'insert')"); err != nil {
			return nil, fmt.Errorf("create publication %s: %w", name, err)
		}
		created = append(created, name)
	}
	l, err := ReadLayout(ctx, tx, table, set)
	if err != nil {
		return nil, err
	}
	for k := range set.N {
		c, ok := l.claim(k, set.N)
		if !ok {
			return nil, fmt.Errorf("%w: publication %s exists but does not publish %s", ErrMismatch, set.PublicationName(k), table)
		}
		if err := c.check(); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return created, nil
}

// DropPublications drops the publications of set, in one transaction.
func DropPublications(ctx context.Context, conn *pgx.Conn, set Set) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock($1)", int64(lockKey)); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	for k := range set.N {
		if _, err := tx.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{set.PublicationName(k)}.Sanitize()); err != nil {
			return fmt.Errorf("drop publication %s: %w", set.PublicationName(k), err)
		}
	}
	return tx.Commit(ctx)
}
