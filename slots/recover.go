package slots

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/internal/republish"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/wire"
)

// RecoverConfig configures a Recovery.
type RecoverConfig struct {
	// DatabaseURL, Slot, Publication and Mappings (or Table) are as in replication.Config, with the
	// same defaults. The registry is read in Table's schema. The role needs REPLICATION, SELECT on
	// the outbox tables and write on the registry (the table owner's).
	DatabaseURL string
	Slot        string
	Publication string
	Table       wire.Table
	Mappings    []wire.Mapping
	// Dial opens the publishing session; required to Recover, not to Inspect or Count.
	Dial Dialer
	// AllRows republishes every row of the outbox tables where the record holds no usable lower
	// bound. A slot adopted and never confirmed on has none, and so has a record from another
	// server.
	AllRows bool
	// AcceptLoss recreates the slot and resets the record although the gap's rows are gone from the
	// table. Producers delete rows as they insert them, say.
	AcceptLoss bool
	// Force recovers although the slot continues from the record. It is for rows the publication
	// did not cover, which no slot decoded, or that the slot cannot decode. A table swapped in by
	// renames leaves such rows, and so does a publication dropped or altered. A stop walbox run
	// recorded (registry.Stop) is a gap without Force.
	Force bool
	// OnParked, if set, is told about every row parked as one that can never be delivered.
	OnParked func(p *wire.Parked)
	// FailoverSlot is as in replication.Config.
	FailoverSlot FailoverSlot
	// ReplicationURL is as in replication.Config: the slot is the standby's, and so is the new one. The rows
	// are read on the standby too, in the new slot's snapshot; the record stays on DatabaseURL.
	ReplicationURL string
}

// withDefaults returns c with each zero value replaced by its default.
func (c RecoverConfig) withDefaults() RecoverConfig {
	if c.Slot == "" {
		c.Slot = wire.DefaultSlot
	}
	if c.Publication == "" {
		c.Publication = wire.DefaultPublication
	}
	if c.Table == (wire.Table{}) {
		c.Table = wire.DefaultTable
	}
	if len(c.Mappings) == 0 {
		c.Mappings = []wire.Mapping{{Table: c.Table}}
	}
	if c.FailoverSlot == "" {
		c.FailoverSlot = FailoverAuto
	}
	return c
}

// validate reports the first bad setting of c, its defaults filled in.
func (c RecoverConfig) validate() error {
	if c.DatabaseURL == "" {
		return errors.New("database url: required")
	}
	if err := CheckName(c.Slot); err != nil {
		return err
	}
	for _, m := range c.Mappings {
		if err := m.Validate(); err != nil {
			return err
		}
	}
	if _, err := ParseFailoverSlot(string(c.FailoverSlot)); err != nil {
		return fmt.Errorf("failover slot %w", err)
	}
	return nil
}

// Slot states a Gap names.
const (
	SlotHealthy     = "healthy"      // exists, not ahead of the record: no gap
	SlotMissing     = "missing"      // dropped, or left behind by a failover
	SlotLost        = "lost"         // invalidated (wal_status lost)
	SlotAhead       = "ahead"        // recreated or advanced past the record
	SlotOtherSystem = "other system" // recorded on another server (a restore, a new cluster)
)

// Gap is what Inspect found: the slot's record and the slot as it is.
type Gap struct {
	Record   registry.Record
	State    string        // one of the Slot* states
	SlotLSN  pglogrepl.LSN // the slot's confirmed_flush_lsn, if it exists
	SystemID string        // this server's system identifier
	Active   string        // the pid streaming from the slot, if any
	exists   bool
	forced   bool
}

// None reports whether there is no gap. The slot continues from the recorded position. And walbox
// run recorded no stop on it, and no recovery was forced.
func (g Gap) None() bool { return g.State == SlotHealthy && !g.forced && !g.Record.Stop.Stopped() }

// lowerBound returns the transaction id from which rows may belong to the gap. It returns false if
// the record holds none that applies here.
func (g Gap) lowerBound() (uint64, bool) {
	return g.Record.ConfirmedXmin, g.Record.ConfirmedXmin != 0 && g.State != SlotOtherSystem
}

// Publisher is the publishing session Recover republishes on (wire.Publisher), which package
// publisher's Session implements. Recover flushes one that is a wire.Flusher before it waits for the
// last confirms.
type Publisher = wire.Publisher

// Dialer opens a publishing session.
type Dialer func(ctx context.Context) (Publisher, error)

// Recovery recovers one lost slot: Inspect, then Count or Recover. Close releases it.
type Recovery struct {
	cfg    RecoverConfig
	repl   *pgconn.PgConn // the replication connection: reads and creates the slot
	db     *pgx.Conn      // an ordinary connection: the registry, the rows
	src    *pgx.Conn      // an ordinary connection to the standby of ReplicationURL; nil without
	reg    *registry.Store
	sys    pglogrepl.IdentifySystemResult
	tables []*gapTable
	// rewrite selects, on pg_class, a table changed by a transaction that may have committed after
	// the recorded position. That is the gap's condition on xmin. It is empty with AllRows.
	rewrite string
	record  registry.Record // the gap's record, read by prepare
}

// OpenRecovery connects to the database twice (a replication and an ordinary connection).
func OpenRecovery(ctx context.Context, cfg RecoverConfig) (*Recovery, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	replURL := cfg.DatabaseURL
	if cfg.ReplicationURL != "" {
		replURL = cfg.ReplicationURL
	}
	repl, err := connect(ctx, replURL)
	if err != nil {
		return nil, err
	}
	r := &Recovery{cfg: cfg, repl: repl}
	if r.db, err = republish.Connect(ctx, cfg.DatabaseURL, "walbox recover"); err != nil {
		r.Close()
		return nil, err
	}
	if err := checkPrimary(r.db.PgConn()); err != nil {
		r.Close()
		return nil, err
	}
	if cfg.ReplicationURL == "" && inRecovery(repl) {
		r.Close()
		return nil, errStandbyAsPrimary()
	}
	if cfg.ReplicationURL != "" {
		if r.src, err = republish.Connect(ctx, cfg.ReplicationURL, "walbox recover"); err != nil {
			r.Close()
			return nil, err
		}
	}
	r.reg = registry.New(r.db, cfg.Table.Schema)
	if err := r.currentRegistry(ctx); err != nil {
		r.Close()
		return nil, err
	}
	if r.sys, err = pglogrepl.IdentifySystem(ctx, repl); err != nil {
		r.Close()
		return nil, fmt.Errorf("identify system: %w", err)
	}
	return r, nil
}

// currentRegistry migrates a registry from an older walbox. So Recover can clear a recorded stop
// when it resets the record. Recover takes the registry owner's rights anyway.
func (r *Recovery) currentRegistry(ctx context.Context) error {
	exists, err := r.reg.Exists(ctx)
	if err != nil || !exists {
		return err
	}
	current, err := r.reg.Current(ctx)
	if err != nil || current {
		return err
	}
	if _, err := migrations.ApplyRegistry(ctx, r.db, r.reg.Schema()); err != nil {
		return fmt.Errorf("%w: %s is out of date and this role cannot migrate it (%v); run `walbox migrate` as the outbox table's owner",
			ErrNoRegistry, r.reg.Table(), err)
	}
	return nil
}

// source is the connection to the slot's server: the slot and the rows are read there.
func (r *Recovery) source() *pgx.Conn {
	if r.src != nil {
		return r.src
	}
	return r.db
}

// Close closes the connections.
func (r *Recovery) Close() {
	if r.db != nil {
		_ = r.db.Close(context.Background())
	}
	if r.src != nil {
		_ = r.src.Close(context.Background())
	}
	_ = r.repl.Close(context.Background())
}

// Inspect reads the slot's record and the slot. A slot without a record is ErrNothingRecorded;
// a gap on a slot another process streams from is ErrSlotActive.
func (r *Recovery) Inspect(ctx context.Context) (Gap, error) {
	slot := r.cfg.Slot
	rec, ok, err := r.reg.Get(ctx, slot)
	if err != nil {
		return Gap{}, err
	}
	if !ok {
		return Gap{}, fmt.Errorf("%w: %s has no record of slot %s, so there is no known position to recover from. "+
			"walbox run and walbox migrate create a slot where nothing was recorded", ErrNothingRecorded, r.reg.Table(), slot)
	}
	info, err := inspect.ReadSlot(ctx, r.source(), slot)
	if err != nil {
		return Gap{}, err
	}
	if err := info.Usable(r.sys.DBName); err != nil && !errors.Is(err, inspect.ErrSlotLost) {
		return Gap{}, err
	}
	g := Gap{Record: rec, SystemID: r.sys.SystemID, SlotLSN: info.ConfirmedFlush, exists: info.Exists, forced: r.cfg.Force}
	if info.ActivePID != nil {
		g.Active = fmt.Sprint(*info.ActivePID)
	}
	switch {
	case !info.Exists:
		g.State = SlotMissing
	case info.WALStatus == "lost":
		g.State = SlotLost
	case rec.SystemID != r.sys.SystemID:
		g.State = SlotOtherSystem
	case info.ConfirmedFlush > rec.ConfirmedLSN:
		g.State = SlotAhead
	default:
		g.State = SlotHealthy
	}
	if !g.None() && info.Active {
		return g, fmt.Errorf("%w: slot %s (%s) is streaming to pid %s; stop whatever streams from it first",
			ErrSlotActive, slot, g.State, g.Active)
	}
	return g, nil
}

// Count is what the gap holds now, per table.
type Count struct {
	Table wire.Table
	Rows  int64 // rows selected as possibly of the gap
	Empty bool  // the table has no rows at all
	// Deleted is the rows deleted from the table that walbox cannot explain
	// (registry.Deletes.Unexplained). Rows of the gap may be among them.
	Deleted int64
	// Rewritten: the table, or one of its partitions, got a new catalog row and another file than
	// its first. A transaction that may have committed after the recorded position wrote that row.
	// TRUNCATE does that, and the statistics do not count its rows; so do VACUUM FULL and CLUSTER.
	Rewritten bool
	// Unseen says why deletes from the table may have gone uncounted since the gap may have begun.
	// The statistics began again, or the server switched timelines. It is empty otherwise.
	Unseen string
}

// Count counts the rows Recover would republish if it ran now. It is an upper bound: rows committed
// from now on are in the gap too until the new slot exists. It changes nothing, and refuses what
// Recover would refuse. It returns the counts when rows of the gap may be gone.
func (r *Recovery) Count(ctx context.Context, g Gap) ([]Count, error) {
	if err := r.prepare(ctx, g); err != nil {
		return nil, err
	}
	counts, err := r.count(ctx, r.source())
	if err != nil || r.cfg.AcceptLoss {
		return counts, err
	}
	return counts, rowsGone(counts)
}

// Result is what Recover did.
type Result struct {
	// ConsistentPoint is the new slot's starting position. Rows committed before it were
	// republished from the table. Rows committed after it stream from the slot.
	ConsistentPoint pglogrepl.LSN
	Rows            int64 // rows selected
	Held            int64 // rows a stream held already, not published again (StreamPublisher)
	Published       int64 // rows republished and confirmed
	Parked          int64 // rows parked, confirmed
	Scheduled       int64 // rows with a deliver_at, recorded in the schedule (Scheduler), of Published
	// LossAccepted: rows of the gap may have been gone from the tables, and the loss was
	// accepted (AcceptLoss). The rows republished are all there were, not all of the gap.
	LossAccepted bool
	Duration     time.Duration
}

// Recover replaces the slot and republishes the gap's rows:
//   - it drops the old slot if it still exists;
//   - it creates a new one with an exported snapshot;
//   - in that snapshot, it republishes every row whose inserting transaction may have committed
//     after the recorded position;
//   - it waits until the broker confirmed each one;
//   - only then does it reset the record to the new slot.
//
// Until then the new slot is ahead of the record, so walbox run refuses it. Running Recover again
// repeats the whole recovery (duplicates only).
func (r *Recovery) Recover(ctx context.Context, g Gap) (Result, error) {
	start := time.Now()
	if g.None() {
		return Result{}, errors.New("no gap to recover")
	}
	if r.cfg.Dial == nil {
		return Result{}, errors.New("recover: dial: required")
	}
	if err := r.prepare(ctx, g); err != nil {
		return Result{}, err
	}
	mayBeGone, err := r.checkRowsThere(ctx)
	if err != nil {
		return Result{}, err
	}
	if g.exists {
		if err := Drop(ctx, r.source(), r.cfg.Slot); err != nil {
			return Result{}, err
		}
	}
	// The horizon is read where the new slot will be, before it exists (see standbyHorizon).
	var horizon uint64
	if r.src != nil {
		horizon, err = standbyHorizon(ctx, r.src)
	} else {
		_, horizon, err = r.reg.Horizon(ctx)
	}
	if err != nil {
		return Result{}, err
	}
	var created createdSlot
	err = whileCreating(ctx, r.repl, r.db, func() (err error) {
		created, err = createLogicalSlot(ctx, r.repl, r.cfg.Slot, r.cfg.FailoverSlot, true)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	lsn := created.lsn
	killpoint.Hit("recover.created")
	res := Result{ConsistentPoint: lsn, LossAccepted: mayBeGone}
	if err := r.republish(ctx, g, created.snapshot, &res); err != nil {
		return res, err
	}
	killpoint.Hit("recover.published")
	err = r.reg.Reset(ctx, registry.Record{Slot: r.cfg.Slot, SystemID: r.sys.SystemID, Timeline: r.sys.Timeline,
		Origin: registry.OriginRecovered, CreatedLSN: lsn, ConfirmedLSN: lsn, ConfirmedXmin: horizon})
	if err == nil && mayBeGone {
		err = r.acceptDeletes(ctx)
	}
	res.Duration = time.Since(start)
	return res, err
}

// republish reads the gap's rows in the slot's exported snapshot and publishes them. The
// replication connection that exported the snapshot stays open and idle meanwhile: the snapshot
// lives until its next command.
func (r *Recovery) republish(ctx context.Context, g Gap, snapshot string, res *Result) error {
	tx, err := r.source().BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(snapshot)); err != nil {
		return fmt.Errorf("import the new slot's snapshot %s: %w", snapshot, err)
	}
	pub, err := r.cfg.Dial(ctx)
	if err != nil {
		return fmt.Errorf("connect to broker: %w", err)
	}
	sp, stream := pub.(StreamPublisher)
	dial := republish.Dialer(r.cfg.Dial)
	if stream {
		dial = nil // a stream session is not redialed: its producer is bound
	}
	rp := republish.New(pub, dial, r.cfg.OnParked)
	rp.Database = wire.ParkedBy(r.sys.SystemID, r.sys.DBName)
	defer func() { _ = rp.Close() }()
	// Rows with a deliver_at go to the schedule: none leaves early, nor once cancelled.
	var now time.Time
	if err := r.db.QueryRow(ctx, "SELECT pg_catalog.clock_timestamp()").Scan(&now); err != nil {
		return fmt.Errorf("read the server's clock: %w", err)
	}
	rp.ScheduleAfter(now)
	each := func(t *gapTable, values [][]byte) error {
		res.Rows++
		return rp.Row(ctx, t.rows, t.mapping.Table, values, time.Time{})
	}
	var stored func() error // checks the stream holds what was published, if into one
	if stream {
		if each, stored, err = r.intoStream(ctx, tx, sp, g, res, rp); err != nil {
			return err
		}
	}
	if err := r.eachRow(ctx, tx, each); err != nil {
		return err
	}
	if err := rp.Wait(ctx); err != nil {
		return err
	}
	if stored != nil {
		if err := stored(); err != nil {
			return err
		}
	}
	res.Published, res.Parked, res.Scheduled = rp.Published(), rp.Parked(), rp.Scheduled()
	return tx.Commit(ctx)
}

// checkRowsThere refuses to go on when rows of the gap may be gone from the tables. The loss may be
// accepted (AcceptLoss). Otherwise recover would republish only what is left and call the gap
// filled. Rows may be gone when every table is empty. They may be gone when the server's statistics
// count deletes from a table that walbox cannot explain (registry.Deletes). Producers that delete
// rows as they insert them make such deletes. So does a DELETE by hand. The deletes of walbox prune
// are explained. It never deletes a row a slot may not have confirmed. It reports whether rows may
// be gone.
func (r *Recovery) checkRowsThere(ctx context.Context) (bool, error) {
	counts, err := r.count(ctx, r.source())
	if err != nil {
		return false, err
	}
	err = rowsGone(counts)
	if err == nil {
		return false, nil
	}
	if !r.cfg.AcceptLoss {
		return true, err
	}
	return true, r.ensureDeletes(ctx)
}

// rowsGone returns why rows of the gap may be gone from the tables counted, or nil.
func rowsGone(counts []Count) error {
	var (
		there   int64
		deleted []string
		empty   = true
	)
	var rewritten, unseen []string
	for _, c := range counts {
		if c.Unseen != "" && !slices.Contains(unseen, c.Unseen) {
			unseen = append(unseen, c.Unseen)
		}
		there += c.Rows
		empty = empty && c.Rows == 0 && c.Empty
		if c.Deleted > 0 {
			deleted = append(deleted, fmt.Sprintf("%s (%d rows of the gap there, %d rows deleted)", c.Table, c.Rows, c.Deleted))
		}
		if c.Rewritten {
			rewritten = append(rewritten, fmt.Sprintf("%s (%d rows of the gap there)", c.Table, c.Rows))
		}
	}
	if len(unseen) > 0 {
		return fmt.Errorf("%w: rows of the gap may be gone without walbox seeing it: %s. "+
			"Only %d rows of the gap are left to republish. If no outbox rows were deleted by hand or by producers that "+
			"delete rows as they insert them, or to republish those and accept the loss of the others, run again with --accept-loss",
			errRowsGone, strings.Join(unseen, "; "), there)
	}
	if len(rewritten) > 0 {
		return fmt.Errorf("%w: rows of the gap may be gone: %s was truncated or rewritten (TRUNCATE, VACUUM FULL, "+
			"CLUSTER), or created or renamed in place of another table, by a transaction that may have committed after the recorded position. "+
			"The statistics do not count the rows a TRUNCATE takes. Only %d rows of the gap are left to republish. "+
			"If no rows went, or to republish those and accept the loss of the others, run again with --accept-loss",
			errRowsGone, strings.Join(rewritten, ", "), there)
	}
	if empty && len(deleted) == 0 {
		return fmt.Errorf("%w: the outbox tables are empty. If producers delete rows as they insert them "+
			"(outbox.DeleteAfterInsert), the rows committed in the gap exist nowhere any more and cannot be republished. "+
			"To recreate the slot and accept that loss, run again with --accept-loss", errRowsGone)
	}
	if len(deleted) == 0 {
		return nil
	}
	return fmt.Errorf("%w: rows of the gap may be gone: the server's statistics count rows deleted from %s "+
		"that walbox prune did not delete (it never deletes a row a slot may not have confirmed). "+
		"Producers that delete rows as they insert them (outbox.DeleteAfterInsert), or a DELETE by hand, took them; "+
		"the rows of the gap among them exist nowhere any more. Only %d rows of the gap are left to republish. "+
		"To republish those, recreate the slot and accept the loss of the others, run again with --accept-loss",
		errRowsGone, strings.Join(deleted, ", "), there)
}

// ensureDeletes creates walbox_deletes beside the registry where it is missing. So Recover can
// record the deletes it accepted, and the next recovery does not count them again.
func (r *Recovery) ensureDeletes(ctx context.Context) error {
	ok, err := registry.DeletesExist(ctx, r.db, r.reg.Schema())
	if err != nil || ok {
		return err
	}
	if _, err := migrations.ApplyRegistry(ctx, r.db, r.reg.Schema()); err != nil {
		return fmt.Errorf("%w: %s.walbox_deletes is missing and this role cannot create it (%v); run `walbox migrate` as the outbox table's owner",
			ErrNoRegistry, r.reg.Schema(), err)
	}
	return nil
}

// acceptDeletes records the deletes the statistics count now as accepted, once the loss was.
func (r *Recovery) acceptDeletes(ctx context.Context) error {
	for _, m := range r.cfg.Mappings {
		if err := registry.AcceptDeletes(ctx, r.db, r.reg.Schema(), m.Table, r.cfg.Slot); err != nil {
			return err
		}
	}
	return nil
}
