package replication

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/wire"
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

// createSlot creates the pgoutput slot, a failover slot if failover says so, and returns its
// consistent point.
func createSlot(ctx context.Context, conn *pgconn.PgConn, slot string, failover FailoverSlot) (pglogrepl.LSN, error) {
	c, err := createLogicalSlot(ctx, conn, slot, failover, false)
	return c.lsn, err
}

// SlotOption sets how EnsureSlot creates a slot.
type SlotOption func(*slotOptions)

type slotOptions struct {
	failover       FailoverSlot
	replicationURL string
}

// WithReplicationURL creates the slot on this server, a hot standby of dsn's (PostgreSQL 16+),
// as Config.ReplicationURL streams from it; the record stays on dsn's server.
func WithReplicationURL(u string) SlotOption {
	return func(o *slotOptions) { o.replicationURL = u }
}

// WithFailoverSlot sets whether the slot is a failover slot (default FailoverAuto).
func WithFailoverSlot(f FailoverSlot) SlotOption {
	return func(o *slotOptions) { o.failover = f }
}

// EnsureSlot creates the slot if it does not exist, records it in reg, and reports whether it
// created it. `walbox migrate` calls it right after creating the publication, so rows committed
// before the first run are covered. A slot that is missing though recorded is not recreated: that
// would skip the rows committed since it vanished (walbox recover deals with that).
//
// The record holds what publication covers of tables, read before the slot is created: a relay
// that starts much later, after the publication or a table was changed and put right again, finds
// the coverage it reads now short of the one recorded, and stops (watch.pinCoverage).
func EnsureSlot(ctx context.Context, dsn, slot, publication string, tables []wire.Table, reg *registry.Store, opts ...SlotOption) (bool, error) {
	o := slotOptions{failover: FailoverAuto}
	for _, opt := range opts {
		opt(&o)
	}
	if !slotName.MatchString(slot) {
		return false, fmt.Errorf("slot %q: use 1 to 63 lowercase letters, digits or underscores", slot)
	}
	replURL, slotDB := dsn, inspect.Querier(reg.DB())
	if o.replicationURL != "" {
		standby, err := connectSQL(ctx, o.replicationURL)
		if err != nil {
			return false, err
		}
		defer standby.Close(context.Background())
		replURL, slotDB = o.replicationURL, standby
	}
	conn, err := connect(ctx, replURL)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	if o.replicationURL == "" && inRecovery(conn) {
		return false, fmt.Errorf("%w: the database url points at a standby (in recovery). Point --database-url at the primary; "+
			"to decode on this standby (PostgreSQL 16+), give it as --replication-url as well", ErrStandby)
	}
	info, err := inspect.ReadSlot(ctx, slotDB, slot)
	if err != nil || info.Exists {
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
	coverage, err := coveredIdentity(ctx, reg.DB(), publication, tables)
	if err != nil {
		return false, err
	}
	_, xmin, err := reg.Horizon(ctx)
	if err != nil {
		return false, err
	}
	var lsn pglogrepl.LSN
	err = whileCreating(ctx, conn, reg.DB(), func() (err error) {
		lsn, err = createSlot(ctx, conn, slot, o.failover)
		return err
	})
	if err != nil {
		return false, err
	}
	_, err = reg.Register(ctx, registry.Record{Slot: slot, SystemID: sys.SystemID, Timeline: sys.Timeline,
		Origin: registry.OriginCreated, CreatedLSN: lsn, ConfirmedLSN: lsn, ConfirmedXmin: xmin})
	if err == nil && coverage != "" {
		_, err = reg.PinCoverage(ctx, slot, coverage)
	}
	return err == nil, err
}

// coveredIdentity returns the identity of what publication covers of tables (inspect.Coverage),
// leaving out the tables it does not cover: a relay starting with one of them has no claim on
// rows written to it before it was covered. Empty when the publication covers none.
func coveredIdentity(ctx context.Context, db inspect.Querier, publication string, tables []wire.Table) (string, error) {
	var covered []wire.Table
	for _, t := range tables {
		c, err := inspect.ReadCoverage(ctx, db, publication, []wire.Table{t})
		if err != nil {
			return "", err
		}
		if c.Err() == nil {
			covered = append(covered, t)
		}
	}
	if len(covered) == 0 {
		return "", nil
	}
	c, err := inspect.ReadCoverage(ctx, db, publication, covered)
	return c.Identity, err
}

// start sends START_REPLICATION for pgoutput protocol 1, without streaming of in-progress
// transactions, and with logical decoding messages if messages is set.
func start(ctx context.Context, conn *pgconn.PgConn, slot, publication string, messages bool, from pglogrepl.LSN) error {
	args := []string{
		"proto_version '1'",
		"publication_names " + quoteLiteral(quoteIdent(publication)),
	}
	if messages {
		args = append(args, "messages 'true'")
	}
	err := pglogrepl.StartReplication(ctx, conn, slot, from, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication, PluginArgs: args,
	})
	if err != nil {
		return fmt.Errorf("start replication from %s: %w", from, classify(err, slot))
	}
	return nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
