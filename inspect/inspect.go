package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/wire"
)

// Errors the judging functions wrap.
var (
	// ErrWalLevel means the server's wal_level is not logical.
	ErrWalLevel = errors.New("wal_level is not logical")
	// ErrNoPublication means the configured publication does not exist.
	ErrNoPublication = errors.New("publication does not exist")
	// ErrNotCovered means the publication does not publish the inserts of an outbox table.
	ErrNotCovered = errors.New("publication does not cover the outbox table")
	// ErrNoTable means an outbox table does not exist (or the role cannot see it).
	ErrNoTable = errors.New("outbox table does not exist")
	// ErrSlotLost means the slot was invalidated (wal_status = lost).
	ErrSlotLost = errors.New("replication slot is invalidated")
	// ErrSlotMismatch means the slot exists but cannot be used (other plugin, other database,
	// physical slot).
	ErrSlotMismatch = errors.New("replication slot cannot be used")
)

// Querier is the part of a pgx connection, pool or transaction inspect uses.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ServerIdentity returns what tells one running server from every other: its system identifier
// and its postmaster's start. A standby has its primary's system identifier, so the start time
// tells the two apart.
func ServerIdentity(ctx context.Context, q Querier) (string, error) {
	var id string
	err := q.QueryRow(ctx, "SELECT system_identifier::text || '/' || pg_catalog.pg_postmaster_start_time()::text FROM pg_catalog.pg_control_system()").Scan(&id)
	if err != nil {
		return "", fmt.Errorf("read the server's identity: %w", err)
	}
	return id, nil
}

// SystemID returns the server's system identifier, as IDENTIFY_SYSTEM and walbox's records
// give it.
func SystemID(ctx context.Context, q Querier) (string, error) {
	var id string
	err := q.QueryRow(ctx, "SELECT system_identifier::pg_catalog.text FROM pg_catalog.pg_control_system()").Scan(&id)
	if err != nil {
		return "", fmt.Errorf("read the server's system identifier: %w", err)
	}
	return id, nil
}

// Database names the database q is connected to, as a parked copy does (wire.ParkedBy). That is
// the server's system identifier and the database's name.
func Database(ctx context.Context, q Querier) (string, error) {
	var system, name string
	err := q.QueryRow(ctx, "SELECT system_identifier::pg_catalog.text, pg_catalog.current_database()::pg_catalog.text"+
		" FROM pg_catalog.pg_control_system()").Scan(&system, &name)
	if err != nil {
		return "", fmt.Errorf("read the server's system identifier: %w", err)
	}
	return wire.ParkedBy(system, name), nil
}

// Server is the server's settings that walbox depends on.
type Server struct {
	Version, WalLevel, User, Database string
	MaxSlots, UsedSlots               int
	MaxSenders, UsedSenders           int
	KeepSizeMB                        int64  // max_slot_wal_keep_size in MB; -1 for no limit
	KeepSize                          string // as the server shows it
	SenderTimeout                     time.Duration
	InRecovery, Replication, Super    bool
}

// ReadServer reads the server's settings.
func ReadServer(ctx context.Context, q Querier) (Server, error) {
	var s Server
	var timeoutMS int64
	err := q.QueryRow(ctx, `SELECT pg_catalog.current_setting('server_version'), pg_catalog.current_setting('wal_level'),
			pg_catalog.current_setting('max_replication_slots')::int, (SELECT pg_catalog.count(*) FROM pg_replication_slots)::int,
			pg_catalog.current_setting('max_wal_senders')::int, (SELECT pg_catalog.count(*) FROM pg_stat_replication)::int,
			(SELECT setting::bigint FROM pg_settings WHERE name = 'max_slot_wal_keep_size'),
			pg_catalog.current_setting('max_slot_wal_keep_size'),
			(SELECT setting::bigint FROM pg_settings WHERE name = 'wal_sender_timeout'),
			pg_catalog.pg_is_in_recovery(), current_user, pg_catalog.current_database(),
			coalesce((SELECT rolreplication FROM pg_roles WHERE rolname = current_user), false),
			coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false)`).
		Scan(&s.Version, &s.WalLevel, &s.MaxSlots, &s.UsedSlots, &s.MaxSenders, &s.UsedSenders, &s.KeepSizeMB, &s.KeepSize,
			&timeoutMS, &s.InRecovery, &s.User, &s.Database, &s.Replication, &s.Super)
	if err != nil {
		return s, fmt.Errorf("read server settings: %w", err)
	}
	s.SenderTimeout = time.Duration(timeoutMS) * time.Millisecond
	return s, nil
}

// RoleExists reports whether a role of that name exists.
func RoleExists(ctx context.Context, q Querier, role string) (bool, error) {
	var exists bool
	if err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", role).Scan(&exists); err != nil {
		return false, fmt.Errorf("look up role %s: %w", role, err)
	}
	return exists, nil
}

// CheckWalLevel reports a wal_level other than logical.
func (s Server) CheckWalLevel() error {
	if s.WalLevel == "logical" {
		return nil
	}
	return fmt.Errorf("%w: wal_level is %s; set wal_level = logical in postgresql.conf and restart the server", ErrWalLevel, s.WalLevel)
}

// Slot is a replication slot's row in pg_replication_slots.
type Slot struct {
	Name                   string
	Exists                 bool
	Type, Plugin, Database string
	Active                 bool
	ActivePID              *int32
	WALStatus              string
	// Failover is set on a failover slot (PostgreSQL 17+). Standbys with sync_replication_slots
	// keep such a slot in step. Synced is set on such a standby's copy of one.
	Failover, Synced bool
	ConfirmedFlush   pglogrepl.LSN
	Restart          pglogrepl.LSN
	CurrentWAL       pglogrepl.LSN // the server's WAL write position when read
	LagBytes         *int64        // from confirmed_flush_lsn to CurrentWAL
	RetainedBytes    *int64        // from restart_lsn to CurrentWAL: the WAL the slot keeps
}

// ReadSlot reads the slot named name; Exists is false when there is none.
func ReadSlot(ctx context.Context, q Querier, name string) (Slot, error) {
	s := Slot{Name: name}
	var current string
	var confirmed, restart, status *string
	err := q.QueryRow(ctx, `SELECT CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() ELSE pg_catalog.pg_current_wal_lsn() END::text,
			coalesce(s.slot_type, ''), coalesce(s.plugin, ''), coalesce(s.database::text, ''), coalesce(s.active, false), s.active_pid, s.wal_status,
			s.confirmed_flush_lsn::text, s.restart_lsn::text,
			coalesce((pg_catalog.to_jsonb(s)->>'failover')::bool, false), coalesce((pg_catalog.to_jsonb(s)->>'synced')::bool, false),
			CASE WHEN pg_catalog.pg_is_in_recovery() THEN NULL ELSE pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint END,
			CASE WHEN pg_catalog.pg_is_in_recovery() THEN NULL ELSE pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), s.restart_lsn)::bigint END
		FROM (SELECT 1) AS one LEFT JOIN pg_replication_slots s ON s.slot_name = $1`, name).
		Scan(&current, &s.Type, &s.Plugin, &s.Database, &s.Active, &s.ActivePID, &status, &confirmed, &restart, &s.Failover, &s.Synced, &s.LagBytes, &s.RetainedBytes)
	if err != nil {
		return s, fmt.Errorf("read slot %s: %w", name, err)
	}
	return s, s.parse(current, confirmed, restart, status)
}

func (s *Slot) parse(current string, confirmed, restart, status *string) error {
	var err error
	if s.CurrentWAL, err = pglogrepl.ParseLSN(current); err != nil {
		return fmt.Errorf("read slot %s: current wal position %q: %w", s.Name, current, err)
	}
	s.Exists = s.Type != ""
	if status != nil {
		s.WALStatus = *status
	}
	for _, p := range []struct {
		text *string
		lsn  *pglogrepl.LSN
	}{{confirmed, &s.ConfirmedFlush}, {restart, &s.Restart}} {
		if p.text == nil {
			continue
		}
		if *p.lsn, err = pglogrepl.ParseLSN(*p.text); err != nil {
			return fmt.Errorf("read slot %s: %q: %w", s.Name, *p.text, err)
		}
	}
	return nil
}

// Usable reports why an existing slot cannot serve walbox in database: not a logical pgoutput
// slot, another database's, or invalidated.
func (s Slot) Usable(database string) error {
	switch {
	case !s.Exists:
		return nil
	case s.Type != "logical" || s.Plugin != "pgoutput":
		return fmt.Errorf("%w: slot %s is a %s slot with plugin %q; walbox needs a logical pgoutput slot",
			ErrSlotMismatch, s.Name, s.Type, s.Plugin)
	case s.Database != database:
		return fmt.Errorf("%w: slot %s belongs to database %s, not %s", ErrSlotMismatch, s.Name, s.Database, database)
	case s.WALStatus == "lost":
		return fmt.Errorf("%w: slot %s has wal_status lost (max_slot_wal_keep_size exceeded); rows after %s are gone from WAL. "+
			"Run `walbox recover` to republish them from the outbox table", ErrSlotLost, s.Name, s.ConfirmedFlush)
	}
	return nil
}

// Coverage is what the publication covers now. It holds the WAL insert position and the xmin
// horizon read in the same statement.
type Coverage struct {
	Publication string
	Exists      bool
	Inserts     bool     // the publication publishes inserts
	Missing     []string // outbox tables it does not contain as they are now (quoted schema.name)
	Absent      []string // outbox tables that do not exist at all (schema.name), among Missing
	Contains    []string // the tables it does contain, when some are missing
	WAL         pglogrepl.LSN
	Xmin        uint64
	// Identity names what was checked: the publication's row version and the identities of the
	// tables. It names the tables' places in the publication too. It changes when the publication
	// or a table is dropped and created again, altered, or swapped by renames. It changes even if
	// it covers the outbox again by the next check.
	Identity string
}

// ReadCoverage reads whether publication publishes inserts of every table, by the tables' current
// identity. The view pg_publication_tables lists tables by what the publication holds (OIDs). So a
// table renamed into place is not covered. It is cheap enough to run several times a second.
func ReadCoverage(ctx context.Context, q Querier, publication string, tables []wire.Table) (Coverage, error) {
	c := Coverage{Publication: publication}
	schemas, names := make([]string, len(tables)), make([]string, len(tables))
	for i, t := range tables {
		schemas[i], names[i] = t.Schema, t.Name
	}
	var wal, xmin string
	var inserts *bool
	var pubID *string
	var tableIDs []string
	var version int
	err := q.QueryRow(ctx, `SELECT pg_catalog.pg_current_wal_insert_lsn()::text, pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::text,
		pg_catalog.current_setting('server_version_num')::int,
		(SELECT pubinsert FROM pg_publication WHERE pubname = $1),
		ARRAY(SELECT pg_catalog.quote_ident(x.s) || '.' || pg_catalog.quote_ident(x.n) FROM ROWS FROM (pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[])) AS x(s, n)
			WHERE NOT EXISTS (SELECT 1 FROM pg_publication_tables t
				WHERE t.pubname = $1 AND t.schemaname = x.s AND t.tablename = x.n)),
		(SELECT oid::text || '@' || xmin::text FROM pg_publication WHERE pubname = $1),
		ARRAY(SELECT coalesce(c.oid::text, '-') || ':' || coalesce((SELECT pg_catalog.string_agg(r.oid::text, ',' ORDER BY r.oid)
				FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid
				WHERE p.pubname = $1 AND r.prrelid = c.oid), '')
			FROM ROWS FROM (pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[])) WITH ORDINALITY AS x(s, n, i)
			LEFT JOIN pg_namespace ns ON ns.nspname = x.s
			LEFT JOIN pg_class c ON c.relnamespace = ns.oid AND c.relname = x.n
			ORDER BY x.i)`,
		publication, schemas, names).Scan(&wal, &xmin, &version, &inserts, &c.Missing, &pubID, &tableIDs)
	if err != nil {
		return c, fmt.Errorf("check publication %s: %w", publication, err)
	}
	c.Exists, c.Inserts = inserts != nil, inserts != nil && *inserts
	for i, id := range tableIDs {
		if strings.HasPrefix(id, "-:") {
			c.Absent = append(c.Absent, tables[i].String())
		}
	}
	if pubID != nil {
		c.Identity = "publication " + *pubID + ", tables " + strings.Join(tableIDs, " ")
		ns, err := schemaEntries(ctx, q, publication, schemas, tableIDs, version)
		if err != nil {
			return c, err
		}
		if ns != "" {
			c.Identity += ", schemas " + ns
		}
	}
	if c.WAL, err = pglogrepl.ParseLSN(wal); err != nil {
		return c, fmt.Errorf("check publication: wal position %q: %w", wal, err)
	}
	if c.Xmin, err = strconv.ParseUint(xmin, 10, 64); err != nil {
		return c, fmt.Errorf("check publication: xmin %q: %w", xmin, err)
	}
	if c.Exists && len(c.Missing) > 0 {
		err = q.QueryRow(ctx, `SELECT ARRAY(SELECT pg_catalog.quote_ident(schemaname) || '.' || pg_catalog.quote_ident(tablename)
			FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1)`, publication).Scan(&c.Contains)
		if err != nil {
			return c, fmt.Errorf("list the tables of publication %s: %w", publication, err)
		}
	}
	return c, nil
}

// schemaEntries returns the identities of the places in publication of the schemas among schemas.
// It does so when a table is covered by no place of its own (a table entry "oid:"). The publication
// then covers it FOR TABLES IN SCHEMA (PostgreSQL 15) or FOR ALL TABLES. A schema dropped from the
// publication and added again gets a new place, as a table does. It is empty when every table has a
// place of its own. So the identity of such a publication reads as it always did.
func schemaEntries(ctx context.Context, q Querier, publication string, schemas, tableIDs []string, version int) (string, error) {
	if version < 150000 || !slices.ContainsFunc(tableIDs, func(id string) bool { return strings.HasSuffix(id, ":") }) {
		return "", nil
	}
	var entries []string
	err := q.QueryRow(ctx, `SELECT ARRAY(SELECT n.pnnspid::text || ':' || n.oid::text
		FROM pg_publication_namespace n JOIN pg_publication p ON p.oid = n.pnpubid
		JOIN pg_namespace ns ON ns.oid = n.pnnspid
		WHERE p.pubname = $1 AND ns.nspname = ANY($2::text[]) ORDER BY n.oid)`, publication, schemas).Scan(&entries)
	if err != nil {
		return "", fmt.Errorf("check publication %s: its schemas: %w", publication, err)
	}
	return strings.Join(entries, " "), nil
}

// Err reports what the coverage lacks: the publication, its inserts, or a table.
func (c Coverage) Err() error {
	pub := quoteIdent(c.Publication)
	switch {
	case !c.Exists:
		return fmt.Errorf("%w: publication %q; run `walbox migrate`, or CREATE PUBLICATION %s FOR TABLE ... WITH (publish = 'insert'). "+
			"If it existed and was dropped, rows written since were not decoded: recreate it, then run `walbox recover --force`",
			ErrNoPublication, c.Publication, pub)
	case !c.Inserts:
		return fmt.Errorf("%w: publication %q does not publish inserts (ALTER PUBLICATION %s SET (publish = 'insert'))",
			ErrNotCovered, c.Publication, pub)
	case len(c.Absent) > 0:
		// Both sentinels: it is a table that is missing, and so a table the publication lacks.
		return fmt.Errorf("%w: table %s does not exist (or the role cannot see it), so the %w; create it with `walbox migrate`, "+
			"or set --table (or the config file's tables) to the outbox table", ErrNoTable, c.Absent[0], ErrNotCovered)
	case len(c.Missing) > 0:
		has := " (it contains no table)"
		if len(c.Contains) > 0 {
			has = " (it contains " + strings.Join(c.Contains, ", ") + "; a table renamed into place is a new table to a publication)"
		}
		return fmt.Errorf("%w: publication %q does not contain table %s as it is now%s; rows written to it are not decoded. "+
			"Add it (ALTER PUBLICATION %s ADD TABLE %s); if rows were written to it meanwhile, run `walbox recover --force`",
			ErrNotCovered, c.Publication, strings.Join(c.Missing, ", "), has, pub, c.Missing[0])
	}
	return nil
}

// ReadColumns returns an outbox table's columns from the catalogs: name to type, as format_type
// shows it. The catalogs hide nothing from a role without SELECT on the table. The result exists is
// false when there is no such table.
func ReadColumns(ctx context.Context, q Querier, t wire.Table) (cols map[string]string, exists bool, err error) {
	var names, types []string
	err = q.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1) IS NOT NULL,
		ARRAY(SELECT attname::text FROM pg_attribute WHERE attrelid = pg_catalog.to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum),
		ARRAY(SELECT pg_catalog.format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = pg_catalog.to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum)`,
		t.Quoted()).Scan(&exists, &names, &types)
	if err != nil {
		return nil, false, fmt.Errorf("read the columns of %s: %w", t, err)
	}
	cols = make(map[string]string, len(names))
	for i, n := range names {
		cols[n] = types[i]
	}
	return cols, exists, nil
}

// CheckTable reads an outbox table's columns and checks them against its mapping. Every session of
// `walbox run` does so before it streams.
func CheckTable(ctx context.Context, q Querier, m wire.Mapping) (map[string]string, error) {
	t := m.WithDefaults().Table
	cols, exists, err := ReadColumns(ctx, q, t)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("%w: %s (or the role cannot see it); run `walbox migrate`, or map the outbox table in the config file", ErrNoTable, t)
	}
	return cols, m.CheckColumns(cols)
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// CoverageHolds reports whether the coverage identity now holds everything the identity recorded
// held:
//   - the same publication;
//   - every table recorded, with the same identity and the same places in it;
//   - every schema recorded, in the same place.
//
// It may hold more. An outbox table may have been mapped and added to the publication since. An
// identity recorded before walbox read the places of the schemas lacks them. A table or schema
// dropped from the publication and added again is not held. Nor is a table swapped by renames. Its
// place or its identity changed. Rows written in between were not decoded.
func CoverageHolds(now, recorded string) bool {
	nowID, ok1 := splitIdentity(now)
	recID, ok2 := splitIdentity(recorded)
	if !ok1 || !ok2 || nowID.publication != recID.publication {
		return false
	}
	return containsAll(nowID.tables, recID.tables) && containsAll(nowID.schemas, recID.schemas)
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// identity is a Coverage.Identity in its parts.
type identity struct {
	publication     string
	tables, schemas []string
}

// splitIdentity splits a Coverage.Identity: "publication <oid>@<xmin>, tables <entry> ...[,
// schemas <entry> ...]".
func splitIdentity(id string) (identity, bool) {
	rest, ok := strings.CutPrefix(id, "publication ")
	if !ok {
		return identity{}, false
	}
	pub, rest, ok := strings.Cut(rest, ", tables")
	if !ok {
		return identity{}, false
	}
	tables, schemas, _ := strings.Cut(rest, ", schemas ")
	out := identity{publication: pub, tables: strings.Fields(tables), schemas: strings.Fields(schemas)}
	for _, t := range out.tables {
		if strings.HasPrefix(t, "-:") { // a table that did not exist holds nothing
			return identity{}, false
		}
	}
	return out, true
}

// CoverageNames reports whether a Coverage.Identity holds the table whose OID is oid. That is
// whether the slot it was recorded for relays that table.
func CoverageNames(identity string, oid uint32) bool {
	id, ok := splitIdentity(identity)
	if !ok {
		return false
	}
	want := strconv.FormatUint(uint64(oid), 10) + ":"
	for _, t := range id.tables {
		if strings.HasPrefix(t, want) {
			return true
		}
	}
	return false
}
