package migrations

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/ownertrust"
	"github.com/walbox/walbox/wire"
)

//go:embed outbox/*.sql
var outboxFS embed.FS

//go:embed registry/*.sql
var registryFS embed.FS

// lockKey serialises concurrent migrations (an arbitrary constant: "walbox" in ASCII).
const lockKey = 0x77616c626f78

// Config names what the outbox migrations create.
type Config struct {
	Table       wire.Table // default wire.DefaultTable
	Publication string     // default "walbox"
	// MessagePrefix is the prefix of the messages the emit function (wire.EmitFunction)
	// writes; default wire.DefaultMessagePrefix. The relay must be given the same one.
	MessagePrefix string
	// NoPublication leaves the publication out, for a table split into shards. Each shard has a
	// publication of its own, with a row filter (package shard).
	NoPublication bool
	// RelayRole is the role `walbox run` logs in as. It is granted EXECUTE on the record functions
	// (RecordFunctions). An empty RelayRole keeps the roles granted before.
	RelayRole string
}

func (c Config) withDefaults() Config {
	if c.Table == (wire.Table{}) {
		c.Table = wire.DefaultTable
	}
	if c.Publication == "" {
		c.Publication = wire.DefaultPublication
	}
	if c.MessagePrefix == "" {
		c.MessagePrefix = wire.DefaultMessagePrefix
	}
	return c
}

// migration is one embedded SQL file.
type migration struct {
	Version int
	Name    string
	sql     string
}

// Apply creates the outbox table, its publication, the emit function (wire.EmitFunction) and the
// slot registry (ApplyRegistry). It runs each migration not yet recorded for this table. It returns
// the names of the migrations it ran: none when all were applied before.
func Apply(ctx context.Context, conn *pgx.Conn, cfg Config) ([]string, error) {
	cfg = cfg.withDefaults()
	vars := map[string]string{
		"Table":              cfg.Table.Quoted(),
		"Publication":        pgx.Identifier{cfg.Publication}.Sanitize(),
		"PublicationLiteral": quoteLiteral(cfg.Publication),
		"Schema":             pgx.Identifier{cfg.Table.Schema}.Sanitize(),
		"MessagePrefix":      quoteLiteral(cfg.MessagePrefix),
		"CreatePublication":  "yes",
	}
	if cfg.NoPublication {
		vars["CreatePublication"] = ""
	}
	ms, err := load(outboxFS, "outbox", vars)
	if err != nil {
		return nil, err
	}
	applied, err := run(ctx, conn, cfg.Table.Schema, "outbox:"+cfg.Table.String(), ms, "", nil)
	if err != nil {
		return nil, err
	}
	if err := checkOwner(ctx, conn, cfg.Table, cfg.RelayRole); err != nil {
		return applied, err
	}
	reg, err := ApplyRegistryFor(ctx, conn, cfg.Table.Schema, cfg.RelayRole)
	return append(applied, reg...), err
}

// ApplyRegistry creates walbox's record of its replication slots in schema, the outbox table's
// schema. The record is the table walbox_slots and the functions the relay records positions with.
// It takes EXECUTE on those functions from PUBLIC. The command `walbox migrate` applies it. And
// `walbox run` applies it when it is missing and the role may.
func ApplyRegistry(ctx context.Context, conn *pgx.Conn, schema string) ([]string, error) {
	return ApplyRegistryFor(ctx, conn, schema, "")
}

// ApplyRegistryFor is ApplyRegistry that also makes relayRole, unless "", a role that may execute
// the record functions. Besides the owner and the caller, it is the only one (see
// RestrictRegistry).
func ApplyRegistryFor(ctx context.Context, conn *pgx.Conn, schema, relayRole string) ([]string, error) {
	ms, err := load(registryFS, "registry", map[string]string{"Schema": pgx.Identifier{schema}.Sanitize()})
	if err != nil {
		return nil, err
	}
	// The grants are restricted in the transaction that creates the functions. Committed on their
	// own, the functions would be PUBLIC's to execute until the next transaction. They would stay
	// PUBLIC's for good if it failed.
	return run(ctx, conn, schema, "registry:"+schema, ms, ScheduleTable, func(tx pgx.Tx) error {
		return restrictRegistry(ctx, tx, schema, relayRole)
	})
}

// load reads the migrations in dir, ordered by the version their names start with, and expands
// their template variables.
func load(fsys fs.FS, dir string, vars map[string]string) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a version number", name)
		}
		raw, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		tmpl, err := template.New(name).Option("missingkey=error").Parse(string(raw))
		if err != nil {
			return nil, fmt.Errorf("parse migration %s: %w", name, err)
		}
		var buf bytes.Buffer
		if err := tmpl.Execute(&buf, vars); err != nil {
			return nil, fmt.Errorf("expand migration %s: %w", name, err)
		}
		ms = append(ms, migration{Version: v, Name: name, sql: buf.String()})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// run applies ms for target in one transaction, holding the advisory lock. It records them in
// walbox_migrations in schema, the schema of what they create. The function finish, unless nil,
// runs last in the same transaction.
//
// Unless lockFirst is "", it names a table in schema that other sessions hold row locks on for long.
// When a pending migration names it, it is locked first (lockBefore).
func run(ctx context.Context, conn *pgx.Conn, schema, target string, ms []migration, lockFirst string, finish func(pgx.Tx) error) ([]string, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin migration: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := pinSearchPath(ctx, tx); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock($1)", int64(lockKey)); err != nil {
		return nil, fmt.Errorf("lock migrations: %w", err)
	}
	l, err := openLedger(ctx, tx, schema)
	if err != nil {
		return nil, err
	}
	var pending []migration
	for _, m := range ms {
		done, err := l.done(ctx, target, m.Version)
		if err != nil {
			return nil, fmt.Errorf("check migration %s: %w", m.Name, err)
		}
		if !done {
			pending = append(pending, m)
		}
	}
	if err := lockBefore(ctx, tx, schema, lockFirst, pending); err != nil {
		return nil, err
	}
	var applied []string
	for _, m := range pending {
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return nil, fmt.Errorf("apply migration %s: %w", m.Name, err)
		}
		if err := l.record(ctx, target, m); err != nil {
			return nil, fmt.Errorf("record migration %s: %w", m.Name, err)
		}
		applied = append(applied, m.Name)
	}
	if finish != nil {
		if err := finish(tx); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("commit migrations: %w", err)
	}
	return applied, nil
}

// lockBefore takes ACCESS EXCLUSIVE on table in schema, if it exists, when one of ms names it.
// Migrations in one transaction lock the table one after another. One took SHARE to create an
// index, a later one waited for ACCESS EXCLUSIVE behind a sending relay's row locks. The relay's
// delete then waited behind that SHARE: a deadlock, and its confirmed batch went again. Each
// migration's own strongest lock first cannot help across migrations: the batch takes the strongest
// at its start.
func lockBefore(ctx context.Context, tx pgx.Tx, schema, table string, ms []migration) error {
	if table == "" {
		return nil
	}
	// The migrations name their tables as {{.Schema}}.name, the schema quoted. A longer name is
	// another table: walbox_schedule_done is not walbox_schedule.
	named := regexp.MustCompile(regexp.QuoteMeta(pgx.Identifier{schema}.Sanitize()+"."+table) + `\b`)
	touches := false
	for _, m := range ms {
		touches = touches || named.MatchString(m.sql)
	}
	if !touches {
		return nil
	}
	qualified := pgx.Identifier{schema, table}.Sanitize()
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1::pg_catalog.text) IS NOT NULL", qualified).Scan(&exists); err != nil {
		return fmt.Errorf("look up %s: %w", qualified, err)
	}
	if !exists {
		return nil
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+qualified+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		return fmt.Errorf("lock %s: %w", qualified, err)
	}
	return nil
}

// ledger is the table walbox_migrations of one schema.
type ledger struct {
	tx    pgx.Tx
	table string // quoted, with its schema
	// ignored is set when the table belongs to a role not trusted to run code as this one
	// (ownertrust). That is a role that may CREATE in the schema and made it first. Its rows are
	// that role's say. A trigger, default or rule on it would run with this role's rights: a
	// superuser's under walbox migrate. Every migration is idempotent: all of them run, and none is
	// recorded.
	ignored bool
}

// openLedger creates walbox_migrations in schema unless it exists, and reads its owner.
func openLedger(ctx context.Context, tx pgx.Tx, schema string) (*ledger, error) {
	l := &ledger{tx: tx, table: pgx.Identifier{schema, "walbox_migrations"}.Sanitize()}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+l.table+` (
		target     pg_catalog.text        NOT NULL,
		version    pg_catalog.int4        NOT NULL,
		name       pg_catalog.text        NOT NULL,
		applied_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now(),
		PRIMARY KEY (target, version))`); err != nil {
		return nil, fmt.Errorf("create %s: %w", l.table, err)
	}
	owner, err := ownertrust.Read(ctx, tx, l.table)
	if err != nil {
		return nil, err
	}
	l.ignored = !owner.Trusted
	return l, nil
}

// done reports whether the ledger records version for target.
func (l *ledger) done(ctx context.Context, target string, version int) (bool, error) {
	if l.ignored {
		return false, nil
	}
	var done bool
	err := l.tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+l.table+" WHERE target = $1::pg_catalog.text AND version = $2::pg_catalog.int4)",
		target, version).Scan(&done)
	return done, err
}

// record records m for target in the ledger.
func (l *ledger) record(ctx context.Context, target string, m migration) error {
	if l.ignored {
		return nil
	}
	_, err := l.tx.Exec(ctx, "INSERT INTO "+l.table+" (target, version, name, applied_at) VALUES ($1, $2, $3, pg_catalog.now())",
		target, m.Version, m.Name)
	return err
}

// pinSearchPath sets search_path to pg_catalog, pg_temp until tx ends. The migrations run on the
// caller's connection, whose path may put public first. An operator planted there with an exact
// match (oid = regclass, name || name, oid = integer) wins. It wins over pg_catalog's, which needs
// a cast; so does a function. With the path pinned, every unqualified name in the migrations and
// the statements around them resolves in pg_catalog. The caller's path is back after the commit.
func pinSearchPath(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)"); err != nil {
		return fmt.Errorf("pin search_path: %w", err)
	}
	return nil
}

func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
