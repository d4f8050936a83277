package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/outbox"
)

// pgFacts are the server settings and the slot, read in one go.
type pgFacts struct {
	version, walLevel, user, database string
	// Names quoted by the server's quote_ident, for the SQL in fixes.
	userSQL, publicationSQL, tableSQL string
	maxSlots, usedSlots               int
	maxSenders, usedSenders           int
	keepSizeMB                        int64
	keepSize                          string
	inRecovery, replication, super    bool
	slot                              *slotRow // nil when missing
}

type slotRow struct {
	slotType, plugin, database, walStatus string
	active                                bool
	activePID                             *int32
	retainedBytes                         *int64
}

// postgres runs the PostgreSQL checks over one ordinary connection and one replication connection.
func (d doctor) postgres(ctx context.Context) []check {
	conn, err := pgx.Connect(ctx, d.dsn)
	if err != nil {
		return []check{failCheck("postgres", "check --database-url (host, port, database, user, password) and that pg_hba.conf admits this client",
			"cannot connect to PostgreSQL: %v", err)}
	}
	defer conn.Close(context.Background())
	f, err := d.readFacts(ctx, conn)
	if err != nil {
		return []check{failCheck("postgres", "run doctor as the role walbox runs as; it must be able to read pg_settings and pg_replication_slots",
			"read server settings: %v", err)}
	}
	out := []check{connectCheck(f, conn.Config()), walLevelCheck(f), slotsCheck(f, d.slot), sendersCheck(f), keepSizeCheck(f),
		roleCheck(f), d.replicationCheck(ctx, f)}
	out = append(out, d.publicationChecks(ctx, conn, f)...)
	out = append(out, d.tableCheck(ctx, conn, f))
	return append(out, slotCheck(f, d.slot))
}

func (d doctor) readFacts(ctx context.Context, conn *pgx.Conn) (pgFacts, error) {
	var f pgFacts
	slot := d.slot
	err := conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('wal_level'),
			current_setting('max_replication_slots')::int, (SELECT count(*) FROM pg_replication_slots)::int,
			current_setting('max_wal_senders')::int, (SELECT count(*) FROM pg_stat_replication)::int,
			(SELECT setting::bigint FROM pg_settings WHERE name = 'max_slot_wal_keep_size'),
			current_setting('max_slot_wal_keep_size'), pg_is_in_recovery(), current_user, current_database(),
			coalesce((SELECT rolreplication FROM pg_roles WHERE rolname = current_user), false),
			coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false),
			quote_ident(current_user), quote_ident($1), quote_ident($2) || '.' || quote_ident($3)`,
		d.publication, d.table.Schema, d.table.Name).
		Scan(&f.version, &f.walLevel, &f.maxSlots, &f.usedSlots, &f.maxSenders, &f.usedSenders, &f.keepSizeMB, &f.keepSize,
			&f.inRecovery, &f.user, &f.database, &f.replication, &f.super, &f.userSQL, &f.publicationSQL, &f.tableSQL)
	if err != nil {
		return f, err
	}
	var s slotRow
	err = conn.QueryRow(ctx, `SELECT slot_type, coalesce(plugin, ''), coalesce(database::text, ''), active, active_pid,
			coalesce(wal_status, ''),
			CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint END
		FROM pg_replication_slots WHERE slot_name = $1`, slot).
		Scan(&s.slotType, &s.plugin, &s.database, &s.active, &s.activePID, &s.walStatus, &s.retainedBytes)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return f, nil
	case err != nil:
		return f, fmt.Errorf("read slot %s: %w", slot, err)
	}
	f.slot = &s
	return f, nil
}

func connectCheck(f pgFacts, cfg *pgx.ConnConfig) check {
	if f.inRecovery {
		return failCheck("postgres", "point --database-url at the primary",
			"PostgreSQL %s at %s is a standby (in recovery): logical decoding needs the primary", f.version, hostPort(&cfg.Config))
	}
	return passCheck("postgres", "connected to PostgreSQL %s at %s, database %s as %s", f.version, hostPort(&cfg.Config), f.database, f.user)
}

func walLevelCheck(f pgFacts) check {
	if f.walLevel == "logical" {
		return passCheck("wal_level", "wal_level = logical")
	}
	return failCheck("wal_level", "ALTER SYSTEM SET wal_level = logical (or set it in postgresql.conf), then restart PostgreSQL",
		"wal_level = %s: logical decoding needs wal_level = logical", f.walLevel)
}

func slotsCheck(f pgFacts, slot string) check {
	need := 1
	if f.slot != nil {
		need = 0 // walbox's slot exists and is counted already
	}
	free := f.maxSlots - f.usedSlots
	const fix = "raise max_replication_slots in postgresql.conf (restart needed), or drop slots nothing uses " +
		"(SELECT slot_name FROM pg_replication_slots WHERE NOT active)"
	switch {
	case free < need:
		return failCheck("max_replication_slots", fix, "max_replication_slots = %d, all in use: no room for slot %s", f.maxSlots, slot)
	case free == need:
		return warnCheck("max_replication_slots", fix, "max_replication_slots = %d, %d in use: no room left for another slot after walbox's",
			f.maxSlots, f.usedSlots+need)
	}
	return passCheck("max_replication_slots", "max_replication_slots = %d, %d in use", f.maxSlots, f.usedSlots)
}

func sendersCheck(f pgFacts) check {
	need := 1
	if f.slot != nil && f.slot.active {
		need = 0 // a WAL sender already streams walbox's slot
	}
	free := f.maxSenders - f.usedSenders
	const fix = "raise max_wal_senders in postgresql.conf (restart needed); a standby walbox takes one while it retries, too"
	switch {
	case free < need:
		return failCheck("max_wal_senders", fix, "max_wal_senders = %d, all in use: walbox cannot start replication", f.maxSenders)
	case free == need:
		return warnCheck("max_wal_senders", fix, "max_wal_senders = %d, %d in use: no room left for a standby walbox or a replica",
			f.maxSenders, f.usedSenders+need)
	}
	return passCheck("max_wal_senders", "max_wal_senders = %d, %d in use", f.maxSenders, f.usedSenders)
}

func keepSizeCheck(f pgFacts) check {
	if f.keepSizeMB < 0 {
		return warnCheck("max_slot_wal_keep_size",
			"set max_slot_wal_keep_size (e.g. 10GB; a reload suffices) to cap it, at a price: a slot further behind is "+
				"invalidated (wal_status lost) and its rows must be republished from the outbox table. "+
				"Either way alert on walbox_slot_retained_wal_bytes",
			"max_slot_wal_keep_size = -1: a stalled slot keeps WAL without bound, until the disk fills")
	}
	return passCheck("max_slot_wal_keep_size", "max_slot_wal_keep_size = %s: a slot further behind is invalidated (wal_status lost); "+
		"alert on walbox_slot_retained_wal_bytes well below it", f.keepSize)
}

func roleCheck(f pgFacts) check {
	switch {
	case f.super:
		return passCheck("role", "role %s is a superuser (LOGIN REPLICATION without superuser is enough)", f.user)
	case f.replication:
		return passCheck("role", "role %s has REPLICATION", f.user)
	}
	return failCheck("role", "as a superuser: ALTER ROLE "+f.userSQL+" REPLICATION",
		"role %s lacks the REPLICATION attribute: it cannot stream from a slot", f.user)
}

// replicationCheck opens a logical replication connection, as `walbox run` does, and runs
// IDENTIFY_SYSTEM: it proves pg_hba.conf and the role admit it.
func (d doctor) replicationCheck(ctx context.Context, f pgFacts) check {
	cfg, err := pgconn.ParseConfig(d.dsn)
	if err != nil {
		return failCheck("replication_connection", "check --database-url", "parse database url: not a valid connection string or URL")
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = "walbox-doctor"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err == nil {
		defer conn.Close(context.Background())
		var res []*pgconn.Result
		if res, err = conn.Exec(ctx, "IDENTIFY_SYSTEM").ReadAll(); err == nil && len(res) == 1 && len(res[0].Rows) == 1 {
			row := res[0].Rows[0]
			return passCheck("replication_connection", "replication connection accepted (timeline %s, WAL at %s)", row[1], row[2])
		}
	}
	msg := "no result"
	if err != nil {
		msg = err.Error()
	}
	fix := "check the server log for the reason"
	switch {
	case strings.Contains(msg, "superuser or replication role"):
		fix = "as a superuser: ALTER ROLE " + f.userSQL + " REPLICATION"
	case strings.Contains(msg, "pg_hba.conf"):
		fix = fmt.Sprintf("add a pg_hba.conf line for database %s and user %s (logical replication connections match "+
			"the database name, not \"replication\"), then reload", f.database, f.user)
	case strings.Contains(msg, "max_wal_senders") || strings.Contains(msg, "too many"):
		fix = "raise max_wal_senders in postgresql.conf (restart needed)"
	}
	return failCheck("replication_connection", fix, "replication connection refused: %s", msg)
}

// publicationChecks checks that the publication exists, publishes inserts and contains the table.
func (d doctor) publicationChecks(ctx context.Context, conn *pgx.Conn, f pgFacts) []check {
	pub := f.publicationSQL
	var ins, upd, del, trunc, all bool
	err := conn.QueryRow(ctx, `SELECT pubinsert, pubupdate, pubdelete, pubtruncate, puballtables
		FROM pg_publication WHERE pubname = $1`, d.publication).Scan(&ins, &upd, &del, &trunc, &all)
	if errors.Is(err, pgx.ErrNoRows) {
		return []check{failCheck("publication", fmt.Sprintf("run `walbox migrate`, or as the table's owner: CREATE PUBLICATION %s "+
			"FOR TABLE %s WITH (publish = 'insert'). It must exist before the slot: if slot %s exists, drop it and let "+
			"`walbox migrate` create it again", pub, f.tableSQL, d.slot), "publication %s does not exist", d.publication)}
	}
	if err != nil {
		return []check{failCheck("publication", "check that the role can read pg_publication", "read publication %s: %v", d.publication, err)}
	}
	onlyInsert := fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert')", pub)
	var ops check
	var extra []string
	for _, op := range []struct {
		on   bool
		name string
	}{{upd, "update"}, {del, "delete"}, {trunc, "truncate"}} {
		if op.on {
			extra = append(extra, op.name)
		}
	}
	switch {
	case !ins:
		ops = failCheck("publication", onlyInsert, "publication %s does not publish inserts: walbox would receive no rows", d.publication)
	case len(extra) > 0:
		ops = warnCheck("publication", onlyInsert, "publication %s also publishes %s: walbox skips them, but every DELETE of outbox rows "+
			"(prune, delete after insert) is decoded and sent to it, and fails on a table without a replica identity",
			d.publication, strings.Join(extra, ", "))
	default:
		ops = passCheck("publication", "publication %s publishes inserts only", d.publication)
	}
	return []check{ops, d.publicationTableCheck(ctx, conn, f, all)}
}

// publicationTableCheck checks that the publication contains the outbox table with every column
// walbox reads, and warns of a row filter.
func (d doctor) publicationTableCheck(ctx context.Context, conn *pgx.Conn, f pgFacts, allTables bool) check {
	var raw []byte
	err := conn.QueryRow(ctx, `SELECT to_jsonb(t) FROM pg_publication_tables t
		WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`, d.publication, d.table.Schema, d.table.Name).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return failCheck("publication_table", fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", f.publicationSQL, f.tableSQL),
			"publication %s does not contain table %s", d.publication, d.table)
	}
	if err != nil {
		return failCheck("publication_table", "check that the role can read pg_publication_tables", "read the tables of publication %s: %v", d.publication, err)
	}
	var row struct {
		Attnames  []string `json:"attnames"`  // PostgreSQL 15+: the published columns
		Rowfilter *string  `json:"rowfilter"` // PostgreSQL 15+
	}
	if err := json.Unmarshal(raw, &row); err != nil {
		return failCheck("publication_table", "", "read the tables of publication %s: %v", d.publication, err)
	}
	if row.Attnames != nil {
		var missing []string
		for col := range outbox.DefaultMapping(d.table).Columns() {
			if !slices.Contains(row.Attnames, col) {
				missing = append(missing, col)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			return failCheck("publication_table", "drop the column list: ALTER PUBLICATION ... DROP TABLE, then ADD TABLE without a list",
				"publication %s leaves out column %s of %s", d.publication, strings.Join(missing, ", "), d.table)
		}
	}
	if row.Rowfilter != nil {
		return warnCheck("publication_table", "drop the row filter unless it is meant: rows it rejects are never relayed",
			"publication %s contains %s with a row filter: WHERE %s", d.publication, d.table, *row.Rowfilter)
	}
	if allTables {
		return passCheck("publication_table", "publication %s contains %s (FOR ALL TABLES)", d.publication, d.table)
	}
	return passCheck("publication_table", "publication %s contains %s", d.publication, d.table)
}

// tableCheck checks that the outbox table has the columns walbox reads, of usable types.
func (d doctor) tableCheck(ctx context.Context, conn *pgx.Conn, f pgFacts) check {
	rows, err := conn.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = $2`, d.table.Schema, d.table.Name)
	if err != nil {
		return failCheck("outbox_table", "", "read the columns of %s: %v", d.table, err)
	}
	cols := map[string]string{}
	var name, typ string
	if _, err := pgx.ForEachRow(rows, []any{&name, &typ}, func() error { cols[name] = typ; return nil }); err != nil {
		return failCheck("outbox_table", "", "read the columns of %s: %v", d.table, err)
	}
	if len(cols) == 0 {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", d.table.Quoted()).Scan(&exists); err == nil && exists {
			return failCheck("outbox_table", fmt.Sprintf("GRANT SELECT ON %s TO %s (walbox reads its columns at start)",
				f.tableSQL, f.userSQL), "role %s cannot see the columns of %s", f.user, d.table)
		}
		return failCheck("outbox_table", "run `walbox migrate`, or set --table to the outbox table (schema.name)", "table %s does not exist", d.table)
	}
	if err := outbox.DefaultMapping(d.table).CheckColumns(cols); err != nil {
		return failCheck("outbox_table", "walbox reads the columns `walbox migrate` creates: id uuid, aggregate_type text, aggregate_id text, "+
			"event_type text, payload jsonb, headers jsonb, created_at timestamptz", "%v", err)
	}
	return columnTypes(d.table, cols)
}

// columnTypes checks the types of the required columns: a wrong one fails, a weak one warns.
func columnTypes(t outbox.Table, cols map[string]string) check {
	id, et, pl := cols[outbox.ColID], cols[outbox.ColEventType], cols[outbox.ColPayload]
	summary := fmt.Sprintf("id %s, event_type %s, payload %s", id, et, pl)
	textual := func(typ string) bool { return typ == "text" || typ == "character varying" || typ == "character" }
	switch {
	case pl != "jsonb" && pl != "json" && !textual(pl):
		return failCheck("outbox_table", "ALTER TABLE ... ALTER COLUMN payload TYPE jsonb", "table %s: payload is %s, not JSON", t, pl)
	case id != "uuid" && !textual(id):
		return failCheck("outbox_table", "ALTER TABLE ... ALTER COLUMN id TYPE uuid", "table %s: id is %s, not a UUID", t, id)
	case !textual(et):
		return failCheck("outbox_table", "ALTER TABLE ... ALTER COLUMN event_type TYPE text", "table %s: event_type is %s, not text", t, et)
	case id != "uuid" || (pl != "jsonb" && pl != "json"):
		return warnCheck("outbox_table", "use id uuid and payload jsonb: the server then rejects bad values at insert",
			"table %s (%s): a row whose id is not a UUID or whose payload is not JSON is parked, not delivered", t, summary)
	}
	return passCheck("outbox_table", "table %s has the outbox columns (%s)", t, summary)
}

// slotCheck checks that the slot is a pgoutput slot of this database that can still deliver.
func slotCheck(f pgFacts, slot string) check {
	s := f.slot
	if s == nil {
		return warnCheck("slot", "run `walbox migrate` (it creates the slot after the publication); otherwise `walbox run` creates it "+
			"at its first start, and rows committed before then are not relayed", "slot %s does not exist", slot)
	}
	recreate := fmt.Sprintf("choose another --slot, or if nothing uses it: SELECT pg_drop_replication_slot('%s'); then `walbox migrate`",
		strings.ReplaceAll(slot, "'", "''"))
	switch {
	case s.slotType != "logical" || s.plugin != "pgoutput":
		return failCheck("slot", recreate, "slot %s is a %s slot with plugin %q: walbox needs a logical pgoutput slot", slot, s.slotType, s.plugin)
	case s.database != f.database:
		return failCheck("slot", "choose another --slot name for database "+f.database, "slot %s belongs to database %s, not %s", slot, s.database, f.database)
	case s.walStatus == "lost":
		return failCheck("slot", "republish the rows committed after the slot's confirmed_flush_lsn from the outbox table, drop the slot "+
			"and run `walbox migrate`", "slot %s is invalidated (wal_status lost): WAL it needed was removed", slot)
	case s.walStatus == "unreserved":
		return warnCheck("slot", "let walbox catch up now, or raise max_slot_wal_keep_size",
			"slot %s has wal_status unreserved: it is invalidated at the next checkpoint unless it catches up", slot)
	}
	state := "inactive (no walbox streams from it)"
	if s.active && s.activePID != nil {
		state = fmt.Sprintf("active (pid %d)", *s.activePID)
	}
	retained := ""
	if s.retainedBytes != nil {
		retained = fmt.Sprintf(", retains %s of WAL", bytesIEC(*s.retainedBytes))
		if f.keepSizeMB > 0 && *s.retainedBytes > f.keepSizeMB<<20*8/10 {
			return warnCheck("slot", "find out why walbox is behind (walbox status; its log), or raise max_slot_wal_keep_size",
				"slot %s retains %s of WAL, over 80%% of max_slot_wal_keep_size = %s: it is invalidated beyond that",
				slot, bytesIEC(*s.retainedBytes), f.keepSize)
		}
	}
	return passCheck("slot", "slot %s: pgoutput in database %s, wal_status %s, %s%s", slot, s.database, s.walStatus, state, retained)
}

func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
