package replication

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/registry"
)

// connect opens a logical replication connection (replication=database).
func connect(ctx context.Context, dsn string) (*pgconn.PgConn, error) {
	conn, _, err := connectWatched(ctx, dsn)
	return conn, err
}

// connectWatched is connect, and also returns a clock of the last time the connection's socket
// read any bytes: a server sending one long message is not silent, though no whole message has
// arrived for a while.
func connectWatched(ctx context.Context, dsn string) (*pgconn.PgConn, *heardClock, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		// The parser's message may quote the connection string, password included.
		return nil, nil, fatal(errors.New("parse database url: not a valid connection string or URL"))
	}
	lastRead := newHeardClock()
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return readClock{Conn: c, last: lastRead}, nil
	}
	cfg.RuntimeParams["replication"] = "database"
	// The decoder parses timestamps in ISO format, whatever the server's default style.
	cfg.RuntimeParams["DateStyle"] = "ISO"
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "walbox"
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return conn, lastRead, nil
}

// readClock records when its connection last read any bytes.
type readClock struct {
	net.Conn
	last *heardClock
}

func (c readClock) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.last.mark()
	}
	return n, err
}

// checkTables checks every mapping against its table's actual columns.
func checkTables(ctx context.Context, conn *pgconn.PgConn, maps []outbox.Mapping) error {
	for _, m := range maps {
		// The catalogs, not information_schema, which hides the columns of a table the role may
		// not SELECT from: a least-privilege relay role (LOGIN REPLICATION) has no grant on it.
		rel := quoteLiteral(quoteIdent(m.Table.Schema) + "." + quoteIdent(m.Table.Name))
		rows, err := query(ctx, conn, `SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
			WHERE attrelid = to_regclass(`+rel+`) AND attnum > 0 AND NOT attisdropped`)
		if err != nil {
			return fmt.Errorf("read the columns of %s: %w", m.Table, err)
		}
		if len(rows) == 0 {
			return fatal(fmt.Errorf("outbox table %s does not exist (or the role cannot see it)", m.Table))
		}
		cols := make(map[string]string, len(rows))
		for _, r := range rows {
			cols[r[0]] = r[1]
		}
		if err := m.CheckColumns(cols); err != nil {
			return fatal(err)
		}
	}
	return nil
}

// slotInfo is the slot's row in pg_replication_slots.
type slotInfo struct {
	exists         bool
	plugin         string
	slotType       string
	database       string
	active         bool
	activePID      string
	walStatus      string
	confirmedFlush pglogrepl.LSN
}

// checkServer verifies wal_level and the publication.
func checkServer(ctx context.Context, conn *pgconn.PgConn, publication string) error {
	rows, err := query(ctx, conn, "SHOW wal_level")
	if err != nil {
		return fmt.Errorf("read wal_level: %w", err)
	}
	if len(rows) != 1 || rows[0][0] != "logical" {
		got := "unknown"
		if len(rows) == 1 {
			got = rows[0][0]
		}
		return fatal(fmt.Errorf("%w: wal_level is %s; set wal_level = logical in postgresql.conf and restart the server", ErrWalLevel, got))
	}
	rows, err = query(ctx, conn, "SELECT pubname FROM pg_publication WHERE pubname = "+quoteLiteral(publication))
	if err != nil {
		return fmt.Errorf("look up publication: %w", err)
	}
	if len(rows) == 0 {
		return fatal(fmt.Errorf("%w: publication %q; run `walbox migrate` or CREATE PUBLICATION %s FOR TABLE ... WITH (publish = 'insert')",
			ErrNoPublication, publication, quoteIdent(publication)))
	}
	return nil
}

// walSenderTimeout reads the server's wal_sender_timeout; zero when it is off.
func walSenderTimeout(ctx context.Context, conn *pgconn.PgConn) (time.Duration, error) {
	rows, err := query(ctx, conn, "SELECT setting FROM pg_settings WHERE name = 'wal_sender_timeout'")
	if err != nil {
		return 0, fmt.Errorf("read wal_sender_timeout: %w", err)
	}
	if len(rows) != 1 {
		return 0, nil
	}
	ms, err := strconv.Atoi(rows[0][0])
	if err != nil {
		return 0, fmt.Errorf("read wal_sender_timeout: %q: %w", rows[0][0], err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// readSlot returns the slot's state.
func readSlot(ctx context.Context, conn *pgconn.PgConn, slot string) (slotInfo, error) {
	rows, err := query(ctx, conn, `SELECT coalesce(plugin, ''), slot_type, coalesce(database::text, ''),
		active::text, coalesce(active_pid::text, ''), coalesce(wal_status, ''), coalesce(confirmed_flush_lsn::text, '0/0'),
		current_database()
		FROM pg_replication_slots WHERE slot_name = `+quoteLiteral(slot))
	if err != nil {
		return slotInfo{}, fmt.Errorf("read slot %s: %w", slot, err)
	}
	if len(rows) == 0 {
		return slotInfo{}, nil
	}
	r := rows[0]
	lsn, err := pglogrepl.ParseLSN(r[6])
	if err != nil {
		return slotInfo{}, fmt.Errorf("read slot %s: confirmed_flush_lsn %q: %w", slot, r[6], err)
	}
	info := slotInfo{exists: true, plugin: r[0], slotType: r[1], database: r[2], active: r[3] == "true",
		activePID: r[4], walStatus: r[5], confirmedFlush: lsn}
	switch {
	case info.slotType != "logical" || info.plugin != "pgoutput":
		return info, fatal(fmt.Errorf("%w: slot %s is a %s slot with plugin %q; walbox needs a logical pgoutput slot",
			ErrSlotMismatch, slot, info.slotType, info.plugin))
	case info.database != r[7]:
		return info, fatal(fmt.Errorf("%w: slot %s belongs to database %s, not %s", ErrSlotMismatch, slot, info.database, r[7]))
	case info.walStatus == "lost":
		return info, fatal(fmt.Errorf("%w: slot %s has wal_status lost (max_slot_wal_keep_size exceeded); rows after %s are gone from WAL. "+
			"Run `walbox recover` (see the README, Slot lost)", ErrSlotLost, slot, info.confirmedFlush))
	}
	return info, nil
}

// createSlot creates the pgoutput slot and returns its consistent point.
func createSlot(ctx context.Context, conn *pgconn.PgConn, slot string) (pglogrepl.LSN, error) {
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	if err != nil {
		return 0, fmt.Errorf("create slot %s: %w", slot, err)
	}
	lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, fmt.Errorf("create slot %s: consistent point %q: %w", slot, res.ConsistentPoint, err)
	}
	return lsn, nil
}

// EnsureSlot creates the slot if it does not exist, records it in reg, and reports whether it
// created it. `walbox migrate` calls it right after creating the publication, so rows committed
// before the first run are covered. A slot that is missing though recorded is not recreated: that
// would skip the rows committed since it vanished (walbox recover deals with that).
func EnsureSlot(ctx context.Context, dsn, slot string, reg *registry.Store) (bool, error) {
	if !slotName.MatchString(slot) {
		return false, fmt.Errorf("slot %q: use 1 to 63 lowercase letters, digits or underscores", slot)
	}
	conn, err := connect(ctx, dsn)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	info, err := readSlot(ctx, conn, slot)
	if err != nil || info.exists {
		return false, err
	}
	rec, recorded, err := reg.Get(ctx, slot)
	if err != nil {
		return false, err
	}
	if recorded {
		return false, fmt.Errorf("%w: slot %s was dropped or lost after walbox confirmed %s on it (at %s); "+
			"recreating it would skip the rows committed since. Run `walbox recover`",
			ErrSlotMissing, slot, rec.ConfirmedLSN, rec.ConfirmedAt.UTC().Format(time.RFC3339))
	}
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return false, fmt.Errorf("identify system: %w", err)
	}
	_, xmin, err := reg.Horizon(ctx)
	if err != nil {
		return false, err
	}
	lsn, err := createSlot(ctx, conn, slot)
	if err != nil {
		return false, err
	}
	_, err = reg.Register(ctx, registry.Record{Slot: slot, SystemID: sys.SystemID, Timeline: sys.Timeline,
		Origin: registry.OriginCreated, CreatedLSN: lsn, ConfirmedLSN: lsn, ConfirmedXmin: xmin})
	return err == nil, err
}

// start sends START_REPLICATION for pgoutput protocol 1, without streaming of in-progress
// transactions.
func start(ctx context.Context, conn *pgconn.PgConn, slot, publication string, from pglogrepl.LSN) error {
	err := pglogrepl.StartReplication(ctx, conn, slot, from, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		PluginArgs: []string{
			"proto_version '1'",
			"publication_names " + quoteLiteral(quoteIdent(publication)),
		},
	})
	if err != nil {
		return fmt.Errorf("start replication from %s: %w", from, classify(err, slot))
	}
	return nil
}

// query runs a simple-protocol query (the only kind a walsender accepts) and returns text rows.
func query(ctx context.Context, conn *pgconn.PgConn, sql string) ([][]string, error) {
	results, err := conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		return nil, err
	}
	var rows [][]string
	for _, res := range results {
		if res.Err != nil {
			return nil, res.Err
		}
		for _, r := range res.Rows {
			row := make([]string, len(r))
			for i, v := range r {
				row[i] = string(v)
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
