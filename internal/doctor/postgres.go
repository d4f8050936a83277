package doctor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/registry"
)

// pgFacts are the server settings and the slot, read by the same inspection `walbox run` uses.
type pgFacts struct {
	inspect.Server
	// Names quoted by the server's quote_ident, for the SQL in fixes.
	userSQL, publicationSQL, tableSQL string
	slot                              inspect.Slot
	// systemID is IDENTIFY_SYSTEM's system identifier, once replicationCheck read it.
	systemID string
}

// postgres runs the PostgreSQL checks over one ordinary connection and one replication connection.
func (d doctor) postgres(ctx context.Context) []Check {
	conn, err := pgconnect.Connect(ctx, d.dsn)
	if err != nil {
		return []Check{failCheck("postgres", "check --database-url (host, port, database, user, password) and that pg_hba.conf admits this client",
			"cannot connect to PostgreSQL: %v", err)}
	}
	defer conn.Close(context.Background())
	f, err := d.readFacts(ctx, conn)
	if err != nil {
		return []Check{failCheck("postgres", "run doctor as the role walbox runs as; it must be able to read pg_settings and pg_replication_slots",
			"read server settings: %v", err)}
	}
	out := []Check{d.connectCheck(f, conn.Config())}
	out = append(out, d.standbyChecks(ctx, conn, &f)...)
	out = append(out, walLevelCheck(f), slotsCheck(f, d.slot), sendersCheck(f), keepSizeCheck(f),
		roleCheck(f), d.replicationCheck(ctx, &f))
	out = append(out, d.publicationChecks(ctx, conn, f)...)
	for _, m := range d.mappings {
		out = append(out, d.tableCheck(ctx, conn, m))
	}
	out = append(out, d.positionIDsCheck(ctx, conn)...)
	out = append(out, d.emitCheck(ctx, conn), d.messageRightsCheck(ctx, conn))
	shards, single, err := d.shardSlots(ctx, conn)
	if err != nil {
		out = append(out, failCheck("slot", "", "%v", err))
	}
	if single {
		sc := slotCheck(f, d.slot)
		if fix, ok := d.goneInReshard(ctx, conn, nil)[d.slot]; ok && !f.slot.Exists {
			sc.Fix = fix
		}
		out = append(out, sc)
	}
	out = append(out, d.failoverChecks(ctx, conn, f)...)
	if single {
		out = append(out, d.recordCheck(ctx, conn, f))
	}
	out = append(out, d.shardChecks(ctx, conn, f, shards)...)
	return append(out, d.recordSchemaCheck(ctx, conn), d.rightsCheck(ctx, conn, f), d.scheduleCheck(ctx, conn))
}

func (d doctor) emitCheck(ctx context.Context, conn *pgx.Conn) Check {
	f, err := inspect.ReadEmit(ctx, conn, d.table, d.prefix)
	if err != nil {
		return failCheck("emit_function", "", "%v", err)
	}
	return emitCheck(f, d.table)
}

func (d doctor) readFacts(ctx context.Context, conn *pgx.Conn) (pgFacts, error) {
	var f pgFacts
	var err error
	if f.Server, err = inspect.ReadServer(ctx, conn); err != nil {
		return f, err
	}
	if f.slot, err = inspect.ReadSlot(ctx, conn, d.slot); err != nil {
		return f, err
	}
	err = conn.QueryRow(ctx, `SELECT pg_catalog.quote_ident(current_user), pg_catalog.quote_ident($1), pg_catalog.quote_ident($2) || '.' || pg_catalog.quote_ident($3)`,
		d.publication, d.table.Schema, d.table.Name).Scan(&f.userSQL, &f.publicationSQL, &f.tableSQL)
	return f, err
}

func (d doctor) connectCheck(f pgFacts, cfg *pgx.ConnConfig) Check {
	switch {
	case f.InRecovery && d.standby != "":
		return failCheck("postgres", "point --database-url at the primary, and --replication-url at the standby",
			"PostgreSQL %s at %s is a standby (in recovery): --database-url must be the primary, where walbox keeps its record",
			f.Version, hostPort(&cfg.Config))
	case f.InRecovery:
		return failCheck("postgres", "point --database-url at the primary; to decode on this standby (PostgreSQL 16+), "+
			"give it as --replication-url and the primary as --database-url",
			"PostgreSQL %s at %s is a standby (in recovery): walbox run stops on it", f.Version, hostPort(&cfg.Config))
	}
	return passCheck("postgres", "connected to PostgreSQL %s at %s, database %s as %s", f.Version, hostPort(&cfg.Config), f.Database, f.User)
}

func walLevelCheck(f pgFacts) Check {
	if f.WalLevel == "logical" {
		return passCheck("wal_level", "wal_level = logical")
	}
	return failCheck("wal_level", "ALTER SYSTEM SET wal_level = logical (or set it in postgresql.conf), then restart PostgreSQL",
		"wal_level = %s: logical decoding needs wal_level = logical", f.WalLevel)
}

func slotsCheck(f pgFacts, slot string) Check {
	need := 1
	if f.slot.Exists {
		need = 0 // walbox's slot exists and is counted already
	}
	free := f.MaxSlots - f.UsedSlots
	const fix = "raise max_replication_slots in postgresql.conf (restart needed), or drop slots nothing uses " +
		"(SELECT slot_name FROM pg_replication_slots WHERE NOT active)"
	switch {
	case free < need:
		return failCheck("max_replication_slots", fix, "max_replication_slots = %d, all in use: no room for slot %s", f.MaxSlots, slot)
	case free == need:
		return warnCheck("max_replication_slots", fix, "max_replication_slots = %d, %d in use: no room left for another slot after walbox's",
			f.MaxSlots, f.UsedSlots+need)
	}
	return passCheck("max_replication_slots", "max_replication_slots = %d, %d in use", f.MaxSlots, f.UsedSlots)
}

func sendersCheck(f pgFacts) Check {
	need := 1
	if f.slot.Active {
		need = 0 // a WAL sender already streams walbox's slot
	}
	free := f.MaxSenders - f.UsedSenders
	const fix = "raise max_wal_senders in postgresql.conf (restart needed); a standby walbox takes one while it retries, too"
	switch {
	case free < need:
		return failCheck("max_wal_senders", fix, "max_wal_senders = %d, all in use: walbox cannot start replication", f.MaxSenders)
	case free == need:
		return warnCheck("max_wal_senders", fix, "max_wal_senders = %d, %d in use: no room left for a standby walbox or a replica",
			f.MaxSenders, f.UsedSenders+need)
	}
	return passCheck("max_wal_senders", "max_wal_senders = %d, %d in use", f.MaxSenders, f.UsedSenders)
}

func keepSizeCheck(f pgFacts) Check {
	if f.KeepSizeMB < 0 {
		return warnCheck("max_slot_wal_keep_size",
			"set max_slot_wal_keep_size (e.g. 10GB; a reload suffices) to cap it, at a price: a slot further behind is "+
				"invalidated (wal_status lost) and its rows must be republished from the outbox table. "+
				"Either way alert on walbox_slot_retained_wal_bytes",
			"max_slot_wal_keep_size = -1: a stalled slot keeps WAL without bound, until the disk fills")
	}
	return passCheck("max_slot_wal_keep_size", "max_slot_wal_keep_size = %s: a slot further behind is invalidated (wal_status lost); "+
		"alert on walbox_slot_retained_wal_bytes well below it", f.KeepSize)
}

func roleCheck(f pgFacts) Check {
	switch {
	case f.Super:
		return passCheck("role", "role %s is a superuser (LOGIN REPLICATION without superuser is enough)", f.User)
	case f.Replication:
		return passCheck("role", "role %s has REPLICATION", f.User)
	}
	return failCheck("role", "as a superuser: ALTER ROLE "+f.userSQL+" REPLICATION",
		"role %s lacks the REPLICATION attribute: it cannot stream from a slot", f.User)
}

// replicationCheck opens a logical replication connection, as `walbox run` does, and runs
// IDENTIFY_SYSTEM: it proves pg_hba.conf and the role admit it. It notes the server's system
// identifier in f.
func (d doctor) replicationCheck(ctx context.Context, f *pgFacts) Check {
	conn, err := d.replicationConn(ctx)
	if errors.Is(err, errBadURL) {
		return failCheck("replication_connection", "check --database-url", "parse database url: not a valid connection string or URL")
	}
	if err == nil {
		defer conn.Close(context.Background())
		var res []*pgconn.Result
		if res, err = conn.Exec(ctx, "IDENTIFY_SYSTEM").ReadAll(); err == nil && len(res) == 1 && len(res[0].Rows) == 1 {
			row := res[0].Rows[0]
			f.systemID = string(row[0])
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
			"the database name, not \"replication\"), then reload", f.Database, f.User)
	case strings.Contains(msg, "max_wal_senders") || strings.Contains(msg, "too many"):
		fix = "raise max_wal_senders in postgresql.conf (restart needed)"
	}
	return failCheck("replication_connection", fix, "replication connection refused: %s", msg)
}

// errBadURL means the database URL does not parse.
var errBadURL = errors.New("parse database url: not a valid connection string or URL")

// replicationConn opens a logical replication connection to the server walbox run streams from.
func (d doctor) replicationConn(ctx context.Context) (*pgconn.PgConn, error) {
	dsn := d.dsn
	if d.standby != "" {
		dsn = d.standby // walbox streams from the standby
	}
	cfg, err := pgconnect.ParseConnConfig(dsn)
	if err != nil {
		return nil, errBadURL
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = "walbox-doctor"
	return pgconn.ConnectConfig(ctx, cfg)
}

// publicationChecks judges the publication as `walbox run` does (inspect.Coverage). The publication
// exists, publishes inserts and holds every outbox table as it is now. Then it warns of what run
// tolerates.
func (d doctor) publicationChecks(ctx context.Context, conn *pgx.Conn, f pgFacts) []Check {
	tables := make([]outbox.Table, len(d.mappings))
	for i, m := range d.mappings {
		tables[i] = m.WithDefaults().Table
	}
	cov, err := inspect.ReadCoverage(ctx, conn, d.publication, tables)
	if err != nil {
		return []Check{failCheck("publication", "check that the role can read pg_publication", "%v", err)}
	}
	if err := cov.Err(); err != nil {
		fix := fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert')", f.publicationSQL)
		switch {
		case !cov.Exists:
			fix = fmt.Sprintf("run `walbox migrate`, or as the table's owner: CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert'). "+
				"It must exist before the slot: if slot %s exists, drop it and let `walbox migrate` create it again", f.publicationSQL, f.tableSQL, d.slot)
		case cov.Inserts:
			fix = fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", f.publicationSQL, strings.Join(cov.Missing, ", "))
		}
		return []Check{failCheck("publication", fix, "%v", err)}
	}
	var upd, del, trunc, all bool
	if err := conn.QueryRow(ctx, `SELECT pubupdate, pubdelete, pubtruncate, puballtables FROM pg_publication WHERE pubname = $1`,
		d.publication).Scan(&upd, &del, &trunc, &all); err != nil {
		return []Check{failCheck("publication", "check that the role can read pg_publication", "read publication %s: %v", d.publication, err)}
	}
	var extra []string
	for _, op := range []struct {
		on   bool
		name string
	}{{upd, "update"}, {del, "delete"}, {trunc, "truncate"}} {
		if op.on {
			extra = append(extra, op.name)
		}
	}
	ops := passCheck("publication", "publication %s publishes inserts of %s", d.publication, tableList(tables))
	if len(extra) > 0 {
		ops = warnCheck("publication", fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert')", f.publicationSQL),
			"publication %s also publishes %s: walbox skips them, but every DELETE of outbox rows (prune, delete after insert) "+
				"is decoded and sent to it, and fails on a table without a replica identity", d.publication, strings.Join(extra, ", "))
	}
	out := []Check{ops}
	for _, m := range d.mappings {
		out = append(out, d.publicationTableCheck(ctx, conn, m, all))
	}
	return out
}

func tableList(tables []outbox.Table) string {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.String()
	}
	return strings.Join(names, ", ")
}

// publicationTableCheck checks that the publication publishes every column walbox reads of the
// table, and warns of a row filter.
func (d doctor) publicationTableCheck(ctx context.Context, conn *pgx.Conn, m outbox.Mapping, allTables bool) Check {
	t := m.WithDefaults().Table
	var attnames []string
	var rowfilter *string
	err := conn.QueryRow(ctx, `SELECT attnames, rowfilter FROM pg_publication_tables
		WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`, d.publication, t.Schema, t.Name).Scan(&attnames, &rowfilter)
	if err != nil {
		return failCheck("publication_table", "check that the role can read pg_publication_tables", "read the tables of publication %s: %v", d.publication, err)
	}
	// A column list (PostgreSQL 15) that leaves out a column walbox reads. The column is in the
	// table, not in what the publication sends. A column missing from the table is tableCheck's.
	cols, _, err := inspect.ReadColumns(ctx, conn, t)
	if err != nil {
		return failCheck("publication_table", "", "%v", err)
	}
	for col := range m.Columns() {
		if _, inTable := cols[col]; inTable && attnames != nil && !slices.Contains(attnames, col) {
			return failCheck("publication_table", "drop the column list: ALTER PUBLICATION ... DROP TABLE, then ADD TABLE without a list",
				"publication %s leaves out column %s of %s, which walbox reads", d.publication, col, t)
		}
	}
	if rowfilter != nil {
		return warnCheck("publication_table", "drop the row filter unless it is meant: rows it rejects are never relayed",
			"publication %s contains %s with a row filter: WHERE %s", d.publication, t, *rowfilter)
	}
	if allTables {
		return passCheck("publication_table", "publication %s contains %s (FOR ALL TABLES)", d.publication, t)
	}
	return passCheck("publication_table", "publication %s contains %s", d.publication, t)
}

// tableCheck checks an outbox table's columns against its mapping, from the catalogs. The command
// `walbox run` does so at the start of every session (inspect.CheckTable). Then it checks their
// types.
func (d doctor) tableCheck(ctx context.Context, conn *pgx.Conn, m outbox.Mapping) Check {
	cols, err := inspect.CheckTable(ctx, conn, m)
	switch {
	case errors.Is(err, inspect.ErrNoTable):
		return failCheck("outbox_table", "run `walbox migrate`, or set --table (or the config file's tables) to the outbox table", "%v", err)
	case err != nil && cols == nil:
		return failCheck("outbox_table", "", "%v", err)
	case err != nil:
		return failCheck("outbox_table", "map the table's columns in the config file (tables:), or give the table the columns "+
			"`walbox migrate` creates: id uuid, aggregate_type text, aggregate_id text, event_type text, payload jsonb, headers jsonb, "+
			"created_at timestamptz", "%v", err)
	}
	return columnTypes(m.WithDefaults(), cols)
}

// columnTypes checks the types of the required columns as the decoder reads them. A payload that
// cannot be JSON fails, and so does an event type that is not text. An id of any type is read as
// text, but the default table's should be a uuid (a warning). A payload should be json or jsonb (a
// warning).
func columnTypes(m outbox.Mapping, cols map[string]string) Check {
	t := m.Table
	id, et, pl := cols[m.ID], cols[m.EventType], cols[m.Payload]
	if m.MessageID == outbox.IDFromPosition {
		id = "uuid" // ids come from positions
	}
	summary := fmt.Sprintf("id %s, event_type %s, payload %s", id, et, pl)
	textual := func(typ string) bool {
		return typ == "text" || strings.HasPrefix(typ, "character varying") || strings.HasPrefix(typ, "character")
	}
	switch {
	case pl != "jsonb" && pl != "json" && !textual(pl):
		return failCheck("outbox_table", "ALTER TABLE ... ALTER COLUMN "+m.Payload+" TYPE jsonb", "table %s: %s (payload) is %s, not JSON", t, m.Payload, pl)
	case !textual(et):
		return failCheck("outbox_table", "ALTER TABLE ... ALTER COLUMN "+m.EventType+" TYPE text", "table %s: %s (event_type) is %s, not text", t, m.EventType, et)
	case (m.ID == outbox.ColID && id != "uuid") || (pl != "jsonb" && pl != "json"):
		return warnCheck("outbox_table", "use id uuid and payload jsonb: the server then rejects bad values at insert",
			"table %s (%s): a row whose id is not a UUID or whose payload is not JSON is parked, not delivered", t, summary)
	}
	return passCheck("outbox_table", "table %s has the outbox columns (%s)", t, summary)
}

// slotCheck checks that the slot is a pgoutput slot of this database that can still deliver.
func slotCheck(f pgFacts, slot string) Check {
	s := f.slot
	if !s.Exists {
		return warnCheck("slot", "run `walbox migrate` (it creates the slot after the publication); otherwise `walbox run` creates it "+
			"at its first start, and rows committed before then are not relayed", "slot %s does not exist", slot)
	}
	recreate := fmt.Sprintf("choose another --slot, or if nothing uses it: SELECT pg_drop_replication_slot('%s'); then `walbox migrate`",
		strings.ReplaceAll(slot, "'", "''"))
	err := s.Usable(f.Database)
	switch {
	case errors.Is(err, inspect.ErrSlotLost):
		return failCheck("slot", "run `walbox recover` to republish the rows committed after the slot's position and replace the slot", "%v", err)
	case err != nil:
		return failCheck("slot", recreate, "%v", err)
	case s.WALStatus == "unreserved":
		return warnCheck("slot", "let walbox catch up now, or raise max_slot_wal_keep_size",
			"slot %s has wal_status unreserved: it is invalidated at the next checkpoint unless it catches up", slot)
	}
	state := "inactive (no walbox streams from it)"
	if s.Active && s.ActivePID != nil {
		state = fmt.Sprintf("active (pid %d)", *s.ActivePID)
	}
	retained := ""
	if s.RetainedBytes != nil {
		retained = fmt.Sprintf(", retains %s of WAL", bytesIEC(*s.RetainedBytes))
		if f.KeepSizeMB > 0 && *s.RetainedBytes > f.KeepSizeMB<<20*8/10 {
			return warnCheck("slot", "find out why walbox is behind (walbox status; its log), or raise max_slot_wal_keep_size",
				"slot %s retains %s of WAL, over 80%% of max_slot_wal_keep_size = %s: it is invalidated beyond that",
				slot, bytesIEC(*s.RetainedBytes), f.KeepSize)
		}
	}
	return passCheck("slot", "slot %s: pgoutput in database %s, wal_status %s, %s%s", slot, s.Database, s.WALStatus, state, retained)
}

// recordCheck compares the slot with walbox's record of it, as `walbox run` does. Run refuses a
// recorded slot that is missing, ahead of the record, or recorded on another server. It refuses one
// stopped on too: walbox run recorded a stop on it.
func (d doctor) recordCheck(ctx context.Context, conn *pgx.Conn, f pgFacts) Check {
	return d.recordCheckOf(ctx, conn, f, d.slot)
}

// recordCheckOf is recordCheck of the slot f holds, named slot.
func (d doctor) recordCheckOf(ctx context.Context, conn *pgx.Conn, f pgFacts, slot string) Check {
	d.slot = slot
	reg := registry.New(conn, d.registry)
	if ok, err := reg.Exists(ctx); err != nil || !ok {
		return warnCheck("slot_record", "run `walbox migrate` as the outbox table's owner (walbox run creates it only if its role may)",
			"%s does not exist: walbox records its slots there", reg.Table())
	}
	rec, recorded, err := reg.Get(ctx, d.slot)
	switch {
	case err != nil:
		return failCheck("slot_record", "", "%v", err)
	case !recorded && f.slot.Exists:
		return passCheck("slot_record", "slot %s is not recorded yet; walbox run records it when it first streams from it", d.slot)
	case !recorded:
		return passCheck("slot_record", "slot %s was never recorded: walbox may create it", d.slot)
	case !f.slot.Exists:
		return failCheck("slot_record", d.recoverFix(),
			"slot %s was recorded (last confirmed %s at %s) but does not exist: walbox run refuses to recreate it",
			d.slot, rec.ConfirmedLSN, rec.ConfirmedAt.UTC().Format(time.RFC3339))
	case f.slot.ConfirmedFlush > rec.ConfirmedLSN:
		return failCheck("slot_record", d.recoverFix(),
			"slot %s is at %s, ahead of %s, the last position walbox recorded: it was recreated or advanced behind walbox's back",
			d.slot, f.slot.ConfirmedFlush, rec.ConfirmedLSN)
	case f.systemID != "" && rec.SystemID != f.systemID:
		return failCheck("slot_record", d.recoverFix(),
			"slot %s was recorded on the server with system identifier %s, but this server is %s (a restore or a new cluster): "+
				"rows committed on the old server after %s may never have been relayed, and walbox run refuses the slot",
			d.slot, rec.SystemID, f.systemID, rec.ConfirmedLSN)
	case rec.Stop.Stopped():
		return failCheck("slot_record", "put the cause right, then run `walbox recover --force` (it republishes the rows "+
			"from the outbox table and replaces the slot); walbox run refuses the slot until then",
			"walbox run stopped on slot %s at %s (%s), where the slot cannot go on: %s",
			d.slot, rec.Stop.LSN, rec.Stop.At.UTC().Format(time.RFC3339), rec.Stop.Reason)
	}
	return passCheck("slot_record", "slot %s matches walbox's record (confirmed %s at %s)", d.slot, rec.ConfirmedLSN,
		rec.ConfirmedAt.UTC().Format(time.RFC3339))
}

// recordSchemaCheck checks the schemas of the outbox tables other than the registry's. It fails
// where one holds a table walbox_slots or a record function. But walbox reads and calls only the
// registry's. A role that may CREATE in that schema may have planted them. Or walbox migrate was
// once given another --table.
func (d doctor) recordSchemaCheck(ctx context.Context, conn *pgx.Conn) Check {
	schemas := make([]string, len(d.mappings))
	for i, m := range d.mappings {
		schemas[i] = m.WithDefaults().Table.Schema
	}
	stray, err := inspect.ReadStrayRecords(ctx, conn, d.registry, schemas)
	if err != nil {
		return failCheck("record_schema", "", "%v", err)
	}
	if len(stray) == 0 {
		return passCheck("record_schema", "walbox's record is %s only: no other outbox table's schema holds a walbox_slots or a record function",
			pgx.Identifier{d.registry, "walbox_slots"}.Sanitize())
	}
	names := make([]string, len(stray))
	drops := make([]string, len(stray))
	for i, s := range stray {
		names[i] = s.Name + " (owner " + s.Owner + ")"
		drops[i] = "DROP " + strings.ToUpper(s.Kind) + " " + s.Name
	}
	return failCheck("record_schema", "check who created them and why, then drop them: "+strings.Join(drops, "; "),
		"walbox keeps its record in schema %s (that of --table) and reads no other, but found %s: "+
			"a role that may create there may have planted them, or walbox migrate was once given another --table",
		d.registry, strings.Join(names, ", "))
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

// emitCheck judges the tableless outbox: messages need PostgreSQL 14. An emit function may write
// another prefix than the relay reads. It would lose every message written through it. The failures
// are inspect.Emit.Err's, on which walbox run refuses to start.
func emitCheck(f inspect.Emit, table outbox.Table) Check {
	const name = "emit_function"
	fn := table.Schema + "." + outbox.EmitFunction
	err := f.Err()
	switch {
	case f.Prefix == "" && f.Exists:
		return warnCheck(name, "set --message-prefix to the prefix "+fn+" emits, or drop the function",
			"%s exists, but walbox relays no messages (--message-prefix none): whatever it writes is never published", fn)
	case f.Prefix == "":
		return passCheck(name, "messages off (--message-prefix none): the table is the only outbox")
	case errors.Is(err, inspect.ErrNoMessages):
		return failCheck(name, "upgrade PostgreSQL, or set --message-prefix none", "%v", err)
	case !f.Exists:
		return warnCheck(name, "run `walbox migrate` to write messages without rows; rows work without it",
			"%s does not exist: messages with prefix %q are relayed, but nothing writes them", fn, f.Prefix)
	case err != nil:
		return failCheck(name, "run walbox with the --message-prefix the function was migrated with, or recreate it", "%v", err)
	}
	return passCheck(name, "%s emits messages with prefix %q, which walbox relays like rows", fn, f.Prefix)
}
