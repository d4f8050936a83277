// Package pgconnect configures every connection walbox opens to PostgreSQL: each one pins its
// search_path to pg_catalog, pg_temp.
//
// Some role may CREATE in a schema on the default search_path. On PostgreSQL 15, for one, the
// database owner may create in public. That role can add an exact-match overload of a polymorphic
// built-in such as to_jsonb(anyelement). Unqualified calls then run its code with the rights of
// whoever calls. That is the relay's role under walbox run, and a superuser under walbox doctor or
// migrate. With the path pinned, built-ins resolve to pg_catalog and temporary objects are never
// searched first. The session's own setting is sent at startup. It wins over ALTER ROLE and ALTER
// DATABASE settings, and over an options parameter in the connection string. And walbox's own
// objects are named with their schema in every statement, so they do not depend on the path. See
// docs/architecture.md for the packages that connect.
//
// Each connection also pins default_transaction_isolation to read committed. walbox's statements
// are written for it. Under a serializable default, schedule batches failed at commit, after their
// confirms. Each was then sent again.
package pgconnect

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// SearchPath is the search_path of every connection walbox opens.
const SearchPath = "pg_catalog, pg_temp"

// Isolation is the default_transaction_isolation of every connection walbox opens. A transaction
// that needs another level names it.
const Isolation = "read committed"

// DefaultConnectTimeout bounds a connection attempt whose URL sets no connect_timeout. Without a
// bound, a server that accepts and never answers kept status, doctor or run waiting for ever.
const DefaultConnectTimeout = 30 * time.Second

// Pin sets the search_path of the connection cfg describes to SearchPath, and its default isolation
// to Isolation. It also bounds the
// connection attempt by DefaultConnectTimeout, unless the URL sets connect_timeout.
func Pin(cfg *pgconn.Config) {
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["search_path"] = SearchPath
	cfg.RuntimeParams["default_transaction_isolation"] = Isolation
}

// ParseConfig is pgx.ParseConfig with the search_path pinned. Its error is pgx's: it may quote
// the connection string, password included.
func ParseConfig(dsn string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	Pin(&cfg.Config)
	return cfg, nil
}

// ParseConnConfig is pgconn.ParseConfig with the search_path pinned, for a connection that
// pgconn serves alone (a replication connection). Its error is pgconn's.
func ParseConnConfig(dsn string) (*pgconn.Config, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	Pin(cfg)
	return cfg, nil
}

// Connect is pgx.Connect with the search_path pinned, and the same errors.
func Connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg)
}
