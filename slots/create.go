package slots

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/wire"
)

// ConnConfig parses dsn into the configuration of a logical replication connection
// (replication=database), as walbox run, migrate and recover open it.
func ConnConfig(dsn string) (*pgconn.Config, error) {
	cfg, err := pgconnect.ParseConnConfig(dsn)
	if err != nil {
		// The parser's message may quote the connection string, password included.
		return nil, errors.New("parse database url: not a valid connection string or URL")
	}
	cfg.RuntimeParams["replication"] = "database"
	// The decoder parses timestamps in ISO format, whatever the server's default style.
	cfg.RuntimeParams["DateStyle"] = "ISO"
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "walbox"
	}
	return cfg, nil
}

// connect opens a logical replication connection.
func connect(ctx context.Context, dsn string) (*pgconn.PgConn, error) {
	cfg, err := ConnConfig(dsn)
	if err != nil {
		return nil, err
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return conn, nil
}

var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// CheckName reports whether slot is a name walbox gives slots: PostgreSQL's rule, 1 to 63
// lowercase letters, digits or underscores.
func CheckName(slot string) error {
	if !slotName.MatchString(slot) {
		return fmt.Errorf("slot %q: use 1 to 63 lowercase letters, digits or underscores", slot)
	}
	return nil
}

// Create creates the pgoutput slot on conn, a logical replication connection, and returns its
// consistent point. It creates a failover slot if failover says so for the server. On a standby it
// has primary log standby snapshots meanwhile. It neither checks nor records anything: EnsureSlot
// does. An error of IsSettingError is one of failover for this server.
func Create(ctx context.Context, conn *pgconn.PgConn, primary Execer, slot string, failover FailoverSlot) (pglogrepl.LSN, error) {
	var lsn pglogrepl.LSN
	err := whileCreating(ctx, conn, primary, func() (err error) {
		lsn, err = createSlot(ctx, conn, slot, failover)
		return err
	})
	return lsn, err
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
	recordFound    bool
}

// withFoundRecorded records a slot that exists without a record. A reshard may have created such a
// slot and not recorded it (killed in between). Its position serves as its consistent point (see
// recordFound).
func withFoundRecorded() SlotOption {
	return func(o *slotOptions) { o.recordFound = true }
}

// WithReplicationURL creates the slot on this server, a hot standby of dsn's (PostgreSQL 16+).
// replication.Config.ReplicationURL then streams from it. The record stays on dsn's server.
func WithReplicationURL(u string) SlotOption {
	return func(o *slotOptions) { o.replicationURL = u }
}

// WithFailoverSlot sets whether the slot is a failover slot (default FailoverAuto).
func WithFailoverSlot(f FailoverSlot) SlotOption {
	return func(o *slotOptions) { o.failover = f }
}

// EnsureSlot creates the slot if it does not exist, records it in reg, and reports whether it
// created it. The command `walbox migrate` calls it right after creating the publication. So rows
// committed before the first run are covered. A slot that is missing though recorded is not
// recreated. That would skip the rows committed since it vanished: walbox recover deals with that.
//
// The record holds what publication covers of tables, read before the slot is created. A relay may
// start much later, after the publication or a table was changed and put right again. It then finds
// the coverage it reads now short of the one recorded, and stops (see package replication).
func EnsureSlot(ctx context.Context, dsn, slot, publication string, tables []wire.Table, reg *registry.Store, opts ...SlotOption) (bool, error) {
	o := slotOptions{failover: FailoverAuto}
	for _, opt := range opts {
		opt(&o)
	}
	if err := CheckName(slot); err != nil {
		return false, err
	}
	replURL, slotDB := dsn, inspect.Querier(reg.DB())
	var standby *pgx.Conn
	if o.replicationURL != "" {
		var err error
		if standby, err = connectSQL(ctx, o.replicationURL); err != nil {
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
	if err != nil {
		return false, err
	}
	rec, recorded, err := reg.Get(ctx, slot)
	if err != nil {
		return false, err
	}
	if info.Exists {
		if recorded || !o.recordFound {
			return false, nil
		}
		return false, recordFound(ctx, conn, reg, info)
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
	// The horizon is read where the slot will be, before it exists. The slot starts at or after the
	// position the horizon was read at.
	var xmin uint64
	if standby != nil {
		xmin, err = standbyHorizon(ctx, standby)
	} else {
		_, xmin, err = reg.Horizon(ctx)
	}
	if err != nil {
		return false, err
	}
	lsn, err := Create(ctx, conn, reg.DB(), slot, o.failover)
	if err != nil {
		return false, err
	}
	killpoint.Hit("slot.created")
	_, err = reg.Register(ctx, registry.Record{Slot: slot, SystemID: sys.SystemID, Timeline: sys.Timeline,
		Origin: registry.OriginCreated, CreatedLSN: lsn, ConfirmedLSN: lsn, ConfirmedXmin: xmin})
	if err == nil && coverage != "" {
		_, err = reg.PinCoverage(ctx, slot, coverage)
	}
	return err == nil, err
}

// recordFound records the slot info, which exists without a record. Until a relay confirms on it, a
// slot's confirmed position is its consistent point. A relay that streamed from it would have
// recorded it. So that position is recorded as its consistent point: it is no earlier than the true
// one. A reshard may take its cut from it. The old set then delivers at least every row the new
// slot does not decode. The record holds no transaction horizon. So prune keeps every row until a
// relay confirms on the slot. Any role with REPLICATION may create a slot of any name. A slot
// walbox cannot stream from is refused, and so is one streaming: a relay records a slot first.
func recordFound(ctx context.Context, conn *pgconn.PgConn, reg *registry.Store, info inspect.Slot) error {
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return fmt.Errorf("identify system: %w", err)
	}
	if err := info.Usable(sys.DBName); err != nil {
		return fmt.Errorf("%w; it exists unrecorded, not created by walbox: drop it or pick another --slot", err)
	}
	if info.Active {
		return fmt.Errorf("%w: slot %s exists unrecorded and streams to pid %d: not a relay of walbox's; stop it, or drop the slot",
			ErrSlotActive, info.Name, deref(info.ActivePID))
	}
	_, err = reg.Register(ctx, registry.Record{Slot: info.Name, SystemID: sys.SystemID, Timeline: sys.Timeline,
		Origin: registry.OriginAdopted, CreatedLSN: info.ConfirmedFlush, ConfirmedLSN: info.ConfirmedFlush})
	return err
}

// coveredIdentity returns the identity of what publication covers of tables (inspect.Coverage). It
// leaves out the tables the publication does not cover. A relay starting with one of them has no
// claim on rows written to it before it was covered. It is empty when the publication covers none.
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

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
