package registry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/internal/ownertrust"
)

// Origins of a record: how walbox came to know the slot.
const (
	OriginCreated   = "created"   // walbox created the slot (migrate or the first run)
	OriginAdopted   = "adopted"   // the slot existed, unrecorded, when walbox first streamed from it
	OriginRecovered = "recovered" // walbox recover created it to replace a lost slot
)

// errNotRecorded means the slot has no record (Confirm), or the registry table is missing.
var errNotRecorded = errors.New("slot is not recorded")

// Record is what the database remembers of one slot.
type Record struct {
	Slot     string
	SystemID string // the server's system identifier when the slot was first recorded
	Timeline int32  // the server's timeline at the last confirm
	Origin   string
	// CreatedLSN is the slot's consistent point, when walbox created it. For an adopted slot it is
	// the slot's position then, no earlier than its consistent point. Zero when unknown.
	CreatedLSN pglogrepl.LSN
	// ConfirmedLSN is the highest position walbox recorded before reporting it to the server.
	ConfirmedLSN pglogrepl.LSN
	// ConfirmedXmin is a transaction id no later than that of any transaction that commits after
	// ConfirmedLSN. It is zero when unknown. The command walbox recover republishes rows from there
	// on.
	ConfirmedXmin uint64
	ConfirmedAt   time.Time
	FirstRecorded time.Time
	// Stop is why walbox run stopped on the slot where only walbox recover gets past; zero if
	// it did not.
	Stop Stop
}

// Stop is a stop walbox run recorded for a slot: nothing committed after LSN was delivered. And the
// slot cannot deliver it (see RecordStop).
type Stop struct {
	Reason string
	LSN    pglogrepl.LSN
	At     time.Time
}

// Stopped reports whether a stop is recorded.
func (s Stop) Stopped() bool { return s.Reason != "" }

// Querier is the part of a pgx connection, pool or transaction the registry uses.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store reads and writes the registry in one schema. That is the schema of the outbox table walbox
// migrate created it for (--table). No other is read, whatever the other outbox tables' schemas.
type Store struct {
	db     Querier
	schema string
	table  string // the quoted table name
}

// New returns the registry kept in schema, accessed through db.
func New(db Querier, schema string) *Store {
	return &Store{db: db, schema: schema, table: pgx.Identifier{schema, "walbox_slots"}.Sanitize()}
}

// DB returns the connection the registry is read through.
func (s *Store) DB() Querier { return s.db }

// Schema returns the schema the registry lives in.
func (s *Store) Schema() string { return s.schema }

// Table returns the registry table's name, for messages.
func (s *Store) Table() string { return s.schema + ".walbox_slots" }

// Exists reports whether the registry table exists.
func (s *Store) Exists(ctx context.Context) (bool, error) {
	var ok bool
	err := s.db.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NOT NULL", s.table).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up %s: %w", s.Table(), err)
	}
	return ok, nil
}

// Current reports whether the registry exists with everything the relay writes through. That
// includes the newest function. A registry from an older walbox needs `walbox migrate`.
func (s *Store) Current(ctx context.Context) (bool, error) {
	var ok bool
	err := s.db.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NOT NULL AND pg_catalog.to_regprocedure($2) IS NOT NULL",
		s.table, s.fn("walbox_slot_stop")+"(text, text, pg_lsn)").Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up %s: %w", s.Table(), err)
	}
	return ok, nil
}

// NewestCreated returns the latest consistent point recorded for any slot, or 0 if none is.
// A reshard's cut is the newest set's latest one; the old set's slots must pass it.
// It skips points past the server's WAL insert position, which no slot of this server has.
// A record restored from another server's dump may hold one; it would hide every cut until WAL reached it.
func (s *Store) NewestCreated(ctx context.Context) (pglogrepl.LSN, error) {
	var got *string
	if err := s.db.QueryRow(ctx, "SELECT pg_catalog.max(created_lsn)::pg_catalog.text FROM "+s.table+
		" WHERE created_lsn OPERATOR(pg_catalog.<=) pg_catalog.pg_current_wal_insert_lsn()").Scan(&got); err != nil {
		return 0, fmt.Errorf("read the newest consistent point in %s: %w", s.Table(), err)
	}
	if got == nil {
		return 0, nil
	}
	return pglogrepl.ParseLSN(*got)
}

// Get returns the slot's record, and false if it has none.
func (s *Store) Get(ctx context.Context, slot string) (Record, bool, error) {
	var (
		r                                 Record
		created, confirmed, xmin, stopLSN *string
		reason                            *string
		stoppedAt                         *time.Time
	)
	if err := s.checkTable(ctx); err != nil {
		return Record{}, false, err
	}
	// The stop's columns are read through to_jsonb: a registry not migrated to them yet reads as
	// recording no stop.
	err := s.db.QueryRow(ctx, `SELECT slot_name, system_identifier, timeline, origin, created_lsn::text,
		confirmed_lsn::text, confirmed_xmin::text, confirmed_at, first_recorded_at,
		pg_catalog.to_jsonb(t)->>'stop_reason', pg_catalog.to_jsonb(t)->>'stop_lsn', (pg_catalog.to_jsonb(t)->>'stopped_at')::timestamptz
		FROM `+s.table+` AS t WHERE slot_name = $1`, slot).Scan(&r.Slot, &r.SystemID, &r.Timeline, &r.Origin,
		&created, &confirmed, &xmin, &r.ConfirmedAt, &r.FirstRecorded, &reason, &stopLSN, &stoppedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("read the record of slot %s: %w", slot, err)
	}
	if r.CreatedLSN, err = parseLSN(created); err != nil {
		return r, true, fmt.Errorf("record of slot %s: created_lsn: %w", slot, err)
	}
	if r.ConfirmedLSN, err = parseLSN(confirmed); err != nil {
		return r, true, fmt.Errorf("record of slot %s: confirmed_lsn: %w", slot, err)
	}
	if reason != nil {
		r.Stop.Reason = *reason
		if stoppedAt != nil {
			r.Stop.At = *stoppedAt
		}
		if r.Stop.LSN, err = parseLSN(stopLSN); err != nil {
			return r, true, fmt.Errorf("record of slot %s: stop_lsn: %w", slot, err)
		}
	}
	if xmin != nil {
		if r.ConfirmedXmin, err = strconv.ParseUint(*xmin, 10, 64); err != nil {
			return r, true, fmt.Errorf("record of slot %s: confirmed_xmin %q: %w", slot, *xmin, err)
		}
	}
	return r, true, nil
}

// Register records a slot that has no record yet, and reports whether it did. False means a record
// already existed and was left alone: another process got there first.
func (s *Store) Register(ctx context.Context, r Record) (bool, error) {
	var added *bool
	err := s.db.QueryRow(ctx, "SELECT "+s.fn("walbox_slot_register")+"($1::text, $2::text, $3::integer, $4::text, $5::text::pg_lsn, $6::text::pg_lsn, $7::text::xid8)",
		r.Slot, r.SystemID, r.Timeline, r.Origin, lsnArg(r.CreatedLSN), r.ConfirmedLSN.String(), xminArg(r.ConfirmedXmin)).Scan(&added)
	if err != nil {
		return false, fmt.Errorf("record slot %s: %w", r.Slot, err)
	}
	return added != nil && *added, nil
}

// Confirm records that walbox is about to confirm lsn on the slot. It returns the recorded
// position, never lower than before. A non-zero xmin is a transaction id no later than any
// transaction that commits after lsn.
func (s *Store) Confirm(ctx context.Context, slot string, timeline int32, lsn pglogrepl.LSN, xmin uint64) (pglogrepl.LSN, error) {
	var got *string
	err := s.db.QueryRow(ctx, "SELECT "+s.fn("walbox_slot_confirm")+"($1::text, $2::integer, $3::text::pg_lsn, $4::text::xid8)::text",
		slot, timeline, lsn.String(), xminArg(xmin)).Scan(&got)
	if err != nil {
		return 0, fmt.Errorf("record position %s of slot %s: %w", lsn, slot, err)
	}
	if got == nil {
		return 0, fmt.Errorf("record position %s of slot %s: %w (its row in %s was deleted)", lsn, slot, errNotRecorded, s.Table())
	}
	return pglogrepl.ParseLSN(*got)
}

// PinCoverage records coverage (inspect.Coverage.Identity) for the slot unless a coverage is
// recorded already, and returns the recorded one.
func (s *Store) PinCoverage(ctx context.Context, slot, coverage string) (string, error) {
	return s.coverage(ctx, "record", slot, "walbox_slot_coverage", "($1::text, $2::text)", slot, coverage)
}

// WidenCoverage replaces the coverage recorded for the slot by coverage, if recorded is still the
// one recorded. It returns the recorded one. The caller has judged that coverage holds everything
// recorded holds (inspect.CoverageHolds).
func (s *Store) WidenCoverage(ctx context.Context, slot, recorded, coverage string) (string, error) {
	return s.coverage(ctx, "widen", slot, "walbox_slot_widen_coverage", "($1::text, $2::text, $3::text)", slot, recorded, coverage)
}

// coverage calls the registry function fn, which returns the slot's recorded coverage.
func (s *Store) coverage(ctx context.Context, verb, slot, fn, params string, args ...any) (string, error) {
	var got *string
	if err := s.db.QueryRow(ctx, "SELECT "+s.fn(fn)+params, args...).Scan(&got); err != nil {
		return "", fmt.Errorf("%s the coverage of slot %s: %w", verb, slot, err)
	}
	if got == nil {
		return "", fmt.Errorf("%s the coverage of slot %s: %w", verb, slot, errNotRecorded)
	}
	return *got, nil
}

// RecordStop records that walbox run stopped on the slot at lsn for reason. Only walbox recover
// gets past such a stop. A stop recorded already stays as it is. It returns the recorded stop's
// reason. The command walbox recover clears it (Reset).
func (s *Store) RecordStop(ctx context.Context, slot, reason string, lsn pglogrepl.LSN) (string, error) {
	var got *string
	err := s.db.QueryRow(ctx, "SELECT "+s.fn("walbox_slot_stop")+"($1, $2, $3::text::pg_lsn)", slot, reason, lsn.String()).Scan(&got)
	if err != nil {
		return "", fmt.Errorf("record the stop of slot %s: %w", slot, err)
	}
	if got == nil {
		return "", fmt.Errorf("record the stop of slot %s: %w", slot, errNotRecorded)
	}
	return *got, nil
}

// Reset replaces the slot's record: the explicit act of an operator (walbox recover). It comes
// after the gap has been dealt with. It writes walbox_slots itself, not through the record
// functions. It refuses a table whose owner is not trusted to run code as this role (asOwner).
func (s *Store) Reset(ctx context.Context, r Record) error {
	err := s.asOwner(ctx, "recover", func() error {
		_, err := s.db.Exec(ctx, `INSERT INTO `+s.table+` AS t (slot_name, system_identifier, timeline, origin,
			created_lsn, confirmed_lsn, confirmed_xmin)
		VALUES ($1, $2, $3, $4, $5::text::pg_lsn, $6::text::pg_lsn, $7::text::xid8)
		ON CONFLICT (slot_name) DO UPDATE SET system_identifier = excluded.system_identifier,
			timeline = excluded.timeline, origin = excluded.origin, created_lsn = excluded.created_lsn,
			confirmed_lsn = excluded.confirmed_lsn, confirmed_xmin = excluded.confirmed_xmin,
			confirmed_at = pg_catalog.now(), first_recorded_at = pg_catalog.now(), coverage = NULL,
			stop_reason = NULL, stop_lsn = NULL, stopped_at = NULL`,
			r.Slot, r.SystemID, r.Timeline, r.Origin, lsnArg(r.CreatedLSN), r.ConfirmedLSN.String(), xminArg(r.ConfirmedXmin))
		return err
	})
	if err != nil {
		return fmt.Errorf("reset the record of slot %s: %w", r.Slot, err)
	}
	return nil
}

// Horizon returns the server's WAL insert position and the xmin horizon of a snapshot taken just
// before it. Any transaction that commits after the position has an id no lower than the horizon.
func (s *Store) Horizon(ctx context.Context) (pglogrepl.LSN, uint64, error) {
	var lsn, xmin string
	err := s.db.QueryRow(ctx, "SELECT pg_catalog.pg_current_wal_insert_lsn()::text, pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::text").Scan(&lsn, &xmin)
	if err != nil {
		return 0, 0, fmt.Errorf("read the wal position: %w", err)
	}
	l, err := pglogrepl.ParseLSN(lsn)
	if err != nil {
		return 0, 0, err
	}
	x, err := strconv.ParseUint(xmin, 10, 64)
	return l, x, err
}

// fn names a registry function with its schema. Calls cast every argument to its parameter's type.
// That is an exact match. So an overload that a role allowed to CREATE in the schema adds is never
// chosen.
func (s *Store) fn(name string) string { return pgx.Identifier{s.schema, name}.Sanitize() }

func parseLSN(s *string) (pglogrepl.LSN, error) {
	if s == nil {
		return 0, nil
	}
	return pglogrepl.ParseLSN(*s)
}

func lsnArg(l pglogrepl.LSN) any {
	if l == 0 {
		return nil
	}
	return l.String()
}

func xminArg(x uint64) any {
	if x == 0 {
		return nil
	}
	return strconv.FormatUint(x, 10)
}

// Forget deletes the slot's record, once the slot itself was dropped on purpose. The command walbox
// reshard does so when it retires a set of shards. The name may then be used again. Like Reset, it
// refuses an owner not trusted to run code as this role.
func (s *Store) Forget(ctx context.Context, slot string) error {
	err := s.asOwner(ctx, "reshard", func() error {
		_, err := s.db.Exec(ctx, "DELETE FROM "+s.table+" WHERE slot_name = $1", slot)
		return err
	})
	if err != nil {
		return fmt.Errorf("forget slot %s: %w", slot, err)
	}
	return nil
}

// errNotATable is returned by Get for a walbox_slots that is a view or another kind of relation. It
// is returned for a table with row level security too. Reading one would run code of its owner with
// the reader's rights: a function the view or a policy calls. The reader is a superuser under
// doctor or status.
var errNotATable = errors.New("walbox_slots is not a plain table")

// checkTable refuses a walbox_slots walbox migrate did not make: a view, or a table with row
// level security. A role that may CREATE in the schema can make one before the first migrate.
func (s *Store) checkTable(ctx context.Context) error {
	var kind, owner string
	var rls bool
	err := s.db.QueryRow(ctx, `SELECT c.relkind::pg_catalog.text, pg_catalog.pg_get_userbyid(c.relowner)::pg_catalog.text, c.relrowsecurity
		FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1::pg_catalog.text)::pg_catalog.oid`,
		s.table).Scan(&kind, &owner, &rls)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil // the read fails, naming the missing table
	case err != nil:
		return fmt.Errorf("look up %s: %w", s.Table(), err)
	case kind != "r":
		return fmt.Errorf("%w: %s (owner %s) is a relation of kind %s, not a table walbox migrate created; reading it would run "+
			"its owner's code as this role. As a superuser, after checking it: drop it and run walbox migrate", errNotATable, s.Table(), owner, kind)
	case rls:
		return fmt.Errorf("%w: %s (owner %s) has row level security: its policies would run as this role. "+
			"As its owner, after checking them: ALTER TABLE %s DISABLE ROW LEVEL SECURITY", errNotATable, s.Table(), owner, s.table)
	}
	return nil
}

// asOwner runs fn, a direct write of the registry table, if its owner is trusted (ownertrust). A
// trusted owner may run code as this role anyway. So a trigger of an application role that owns
// walbox_slots never runs as a superuser. Such a superuser runs walbox recover or reshard.
// Otherwise asOwner returns the error naming the owner.
func (s *Store) asOwner(ctx context.Context, command string, fn func() error) error {
	if err := ownertrust.Check(ctx, s.db, s.table, command); err != nil {
		return err
	}
	return fn()
}
