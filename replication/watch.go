package replication

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/checkpoint"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/wire"
)

// watchTimeout bounds each query on the watch connection.
const watchTimeout = 5 * time.Second

// watch is a session's second, ordinary connection to the database.
// The replication connection accepts no queries while it streams.
// Through it the session:
//   - records each position in the registry before reporting it to the server;
//   - checks that the publication still publishes the inserts of every outbox table, as it is now.
//     A publication names tables by OID, so a table swapped in by renames is not covered.
//     For a sharded relay, it checks the row filter of its shard too.
//
// The position reported is capped at the WAL insert position that the check before the last successful one read.
// A change of the publication that the last check could not yet see committed after that point.
// So nothing the relay confirms lies beyond a verified position.
// When the relay streams from a standby, the cap is also the standby's replay position.
// The last check read it (see checkStandby).
type watch struct {
	conn    *pgx.Conn
	standby *pgx.Conn // the replication server's, to read a standby's slot; nil: conn's
	// primaryToo is set when the replication server is conn's server itself.
	// That is a standby given as --replication-url that was promoted, with --database-url pointed at it.
	primaryToo bool
	// walsender is the process id of the session's walsender, as the server gives it (see
	// checkOneStart); 0 until read.
	walsender uint32

	reg         *registry.Store
	slot        string
	publication string
	tables      []wire.Table
	timeline    int32
	// identity is what the relay's first check found the publication and tables to be.
	// The Relay keeps it across its sessions (see inspect.Coverage.Identity).
	identity *string
	shard    int // the shard of shards this relay streams; shards 0: not sharded
	shards   int

	interval time.Duration // how often the publication is checked while streaming

	checks []walCheck // the last successful checks, oldest first
	// On a standby: the records not yet seen replayed there (see replicated).
	// Also the highest recorded position whose record the standby replayed.
	unreplayed []recordedAt
	replayed   pglogrepl.LSN
	limit      pglogrepl.LSN // the position the relay may confirm up to
	recorded   pglogrepl.LSN // the position recorded in the registry
	settled    pglogrepl.LSN // the last end of outbox transactions whose horizon is recorded (owesHorizon)
	created    pglogrepl.LSN // the newest consistent point recorded for any slot (NewestCreated)
	checked    time.Time     // when the last check succeeded
}

// walCheck is what one successful check read: the WAL insert position and the xmin horizon.
type walCheck struct {
	wal  pglogrepl.LSN
	xmin uint64
}

// recordedAt is a position recorded, and the primary's WAL insert position after that record.
type recordedAt struct{ lsn, after pglogrepl.LSN }

// maxChecks is how many checks the watch remembers to find an xmin horizon for a position.
const maxChecks = 64

// openWatch connects the watch connection and makes sure the registry exists.
func openWatch(ctx context.Context, cfg *Config, timeline int32, identity *string) (*watch, error) {
	pcfg, err := pgconnect.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fatal(errors.New("parse database url: not a valid connection string or URL"))
	}
	if pcfg.RuntimeParams["application_name"] == "" {
		pcfg.RuntimeParams["application_name"] = "walbox"
	}
	conn, err := pgx.ConnectConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	if err := checkPrimary(conn.PgConn()); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	w := &watch{conn: conn, slot: cfg.Slot, publication: cfg.Publication, timeline: timeline, identity: identity,
		shard: cfg.Shard, shards: cfg.Shards, interval: cfg.StatusInterval}
	for _, m := range cfg.Mappings {
		w.tables = append(w.tables, m.Table)
	}
	fctx, cancel := context.WithTimeout(ctx, watchTimeout)
	defer cancel()
	if cfg.ReplicationURL != "" {
		if w.standby, err = connectSQL(ctx, cfg.ReplicationURL); err != nil {
			w.close()
			return nil, err
		}
		if w.primaryToo, err = sameServer(fctx, conn, w.standby); err != nil {
			w.close()
			return nil, err
		}
	}
	w.reg = registry.New(conn, cfg.Table.Schema)
	if err := w.ensureRegistry(ctx, cfg.Mappings); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

func (w *watch) close() {
	_ = w.conn.Close(context.Background())
	if w.standby != nil {
		_ = w.standby.Close(context.Background())
	}
}

// slotDB is the connection to read the slot through: the replication server's.
func (w *watch) slotDB() *pgx.Conn {
	if w.standby != nil {
		return w.standby
	}
	return w.conn
}

// ensureRegistry creates the registry if it is missing and the role may.
// A relay role with only LOGIN REPLICATION may not, and then `walbox migrate` must run first.
// It refuses a registry missing from the schema of --table while another outbox table's schema has one.
// Walbox reads only the one walbox migrate created.
// It would otherwise start a new, empty record.
func (w *watch) ensureRegistry(ctx context.Context, maps []wire.Mapping) error {
	ok, err := w.reg.Current(ctx)
	if err != nil {
		return err
	}
	if !ok {
		if err := w.refuseStrayRegistry(ctx, maps); err != nil {
			return err
		}
		if _, err := migrations.ApplyRegistry(ctx, w.conn, w.reg.Schema()); err != nil {
			return fatal(fmt.Errorf("%w: %s is missing or out of date and this role cannot migrate it (%v); "+
				"run `walbox migrate` as the outbox table's owner", slots.ErrNoRegistry, w.reg.Table(), err))
		}
	}
	return w.checkRecordRights(ctx)
}

// refuseStrayRegistry refuses a missing registry while another outbox table's schema has a table walbox_slots.
// The slot's record may be there, from a walbox migrate given another --table.
func (w *watch) refuseStrayRegistry(ctx context.Context, maps []wire.Mapping) error {
	exists, err := w.reg.Exists(ctx)
	if err != nil || exists {
		return err
	}
	schemas := make([]string, len(maps))
	for i, m := range maps {
		schemas[i] = m.Table.Schema
	}
	stray, err := inspect.ReadStrayRecords(ctx, w.conn, w.reg.Schema(), schemas)
	if err != nil {
		return err
	}
	for _, s := range stray {
		if s.Kind == "table" {
			return fatal(fmt.Errorf("%w: %s does not exist, but %s (owner %s) does. walbox keeps its record only in the schema "+
				"of --table, where walbox migrate creates it: set --table (WALBOX_TABLE) to the table walbox migrate was given",
				slots.ErrNoRegistry, w.reg.Table(), s.Name, s.Owner))
		}
	}
	return nil
}

// checkRecordRights makes sure this role may execute the functions that move the record.
// Otherwise the first position to record would fail, after the relay had published.
func (w *watch) checkRecordRights(ctx context.Context) error {
	var role string
	var denied []string
	err := w.conn.QueryRow(ctx, `SELECT current_user, ARRAY(SELECT p.proname::text FROM pg_proc p
			WHERE p.pronamespace = pg_catalog.to_regnamespace($1) AND p.proname = ANY($2)
			  AND NOT pg_catalog.has_function_privilege(p.oid, 'EXECUTE') ORDER BY 1)`,
		pgx.Identifier{w.reg.Schema()}.Sanitize(), migrations.RecordFunctions).Scan(&role, &denied)
	if err != nil {
		return fmt.Errorf("read the rights on %s: %w", w.reg.Table(), err)
	}
	if len(denied) > 0 {
		return fatal(fmt.Errorf("%w: role %s may not execute %s, which record the slot's position; "+
			"run `walbox migrate --relay-role %s` as the outbox table's owner",
			errRecordDenied, role, strings.Join(denied, ", "), shellWord(role)))
	}
	// A record made by another role before walbox migrate did is that role's to move.
	owner, trusted, err := migrations.ReadOwner(ctx, w.conn, w.reg.Schema(), w.tables, role)
	if err != nil {
		return err
	}
	if !trusted {
		return fatal(fmt.Errorf("%w: %s belongs to %s, which is no superuser, owns no outbox table walbox relays and is not this role (%s): "+
			"%s can move the record past a gap; as a superuser, after checking its rows and the code of the record functions, "+
			"give walbox_slots, walbox_relay_roles, walbox_migrations and the record functions in schema %s to the outbox table's owner",
			migrations.ErrRecordOwner, w.reg.Table(), owner, role, owner, w.reg.Schema()))
	}
	// Record functions of another owner than walbox_slots' run its triggers with their rights.
	if err := migrations.CheckDefiners(ctx, w.conn, w.reg.Schema()); err != nil {
		return fatal(err)
	}
	return w.refuseForeignDefiners(ctx)
}

// refuseForeignDefiners refuses, to a superuser, record functions of a role that is no superuser.
// Their owner's code runs inside them, in this session.
// Before PostgreSQL 18, a deferred trigger it queues fires at commit as the session's role.
// A statement it prepares outlives the call.
// The application's role that migrated would run code as the superuser at every confirm.
func (w *watch) refuseForeignDefiners(ctx context.Context) error {
	var role string
	var owners []string
	err := w.conn.QueryRow(ctx, `SELECT current_user::pg_catalog.text, ARRAY(SELECT DISTINCT o.rolname::pg_catalog.text
			FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_roles o ON o.oid OPERATOR(pg_catalog.=) p.proowner
			WHERE p.pronamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace($1::pg_catalog.text)::pg_catalog.oid
			  AND p.proname OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.text[]) AND NOT o.rolsuper
			  AND (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) current_user)
			ORDER BY 1)`, pgx.Identifier{w.reg.Schema()}.Sanitize(), migrations.RecordFunctions).Scan(&role, &owners)
	if err != nil {
		return fmt.Errorf("read the owners of the record functions in %s: %w", w.reg.Schema(), err)
	}
	if len(owners) == 0 {
		return nil
	}
	return fatal(fmt.Errorf("%w: the record functions in %s belong to %s, and %s is a superuser: code of %s runs inside them, "+
		"in this session, at every confirm; run walbox run as the relay role (walbox migrate --relay-role <role>)",
		migrations.ErrRecordOwner, w.reg.Schema(), strings.Join(owners, ", "), role, strings.Join(owners, ", ")))
}

// shellWord quotes s for a shell command line unless it needs no quoting.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// check verifies that the publication publishes inserts of every outbox table.
// It remembers the WAL insert position and xmin horizon it read.
// A failed check is fatal: rows written to an uncovered table are never decoded.
// Carrying on would skip them silently.
func (w *watch) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, watchTimeout)
	defer cancel()
	c, err := inspect.ReadCoverage(ctx, w.conn, w.publication, w.tables)
	if err != nil {
		return err
	}
	if err := c.Err(); err != nil {
		return fatal(err)
	}
	if w.shards > 0 {
		for _, t := range w.tables {
			if err := shard.CheckPublication(ctx, w.conn, w.publication, t, w.shard, w.shards); err != nil {
				return fatal(err)
			}
		}
	}
	// A change put right again between two checks leaves every check satisfied.
	// But rows written in between were not decoded.
	// A publication or table that is not the one checked before is a change walbox cannot see past.
	if *w.identity == "" {
		*w.identity = c.Identity
	} else if c.Identity != *w.identity {
		return fatal(fmt.Errorf("%w: publication %q or an outbox table was dropped, altered or swapped since walbox first checked it "+
			"(%s; now %s): rows written in between may not have been decoded, although the publication covers the outbox again. "+
			"If rows were written meanwhile, run `walbox recover`; then start walbox again",
			ErrNotCovered, w.publication, *w.identity, c.Identity))
	}
	replayed, err := w.checkStandby(ctx)
	if err != nil {
		return err
	}
	if n := len(w.checks); n > 0 {
		w.limit = max(w.limit, min(w.checks[n-1].wal, replayed))
	}
	for len(w.unreplayed) > 0 && w.unreplayed[0].after <= replayed {
		w.replayed = max(w.replayed, w.unreplayed[0].lsn)
		w.unreplayed = w.unreplayed[1:]
	}
	if len(w.checks) == maxChecks {
		w.checks = w.checks[1:]
	}
	w.checks = append(w.checks, walCheck{wal: c.WAL, xmin: c.Xmin})
	w.checked = time.Now()
	return nil
}

// pinCoverage checks the coverage the first check found against the one recorded for the slot.
// It records it if there is none; walbox migrate records it when it creates the slot.
// Otherwise a publication or table changed while no walbox ran, and put right before this start, would pass unseen.
// A coverage with everything recorded and more widens the record.
// The command walbox recover clears the recorded coverage.
func (w *watch) pinCoverage(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, watchTimeout)
	defer cancel()
	recorded, err := w.reg.PinCoverage(ctx, w.slot, *w.identity)
	if err != nil {
		return err
	}
	if recorded != *w.identity && inspect.CoverageHolds(*w.identity, recorded) {
		// An outbox table mapped and added to the publication since: the record takes it in.
		// So it is checked from now on as well.
		if recorded, err = w.reg.WidenCoverage(ctx, w.slot, recorded, *w.identity); err != nil {
			return err
		}
	}
	if recorded != *w.identity {
		return fatal(fmt.Errorf("%w: publication %q or an outbox table was dropped, altered or swapped since walbox recorded it "+
			"for slot %s (%s; now %s): rows written while it did not cover the outbox were not decoded. If rows were written "+
			"meanwhile, run `walbox recover --force` (it republishes them and records the coverage anew); then start walbox again",
			ErrNotCovered, w.publication, w.slot, recorded, *w.identity))
	}
	return nil
}

// capAt returns w capped at the last position the watch verified the publication for.
// The publication is checked again when the check is due (every interval), or when the cap keeps w back.
// A check whose predecessor read a position past w lifts the cap.
// So it takes at most two more checks, one round trip each.
func (w *watch) capAt(ctx context.Context, mark pglogrepl.LSN) (pglogrepl.LSN, error) {
	if time.Since(w.checked) >= w.interval {
		if err := w.check(ctx); err != nil {
			return 0, err
		}
		if err := w.readCreated(ctx); err != nil {
			return 0, err
		}
	}
	for i := 0; i < 2 && mark > w.limit; i++ {
		if err := w.check(ctx); err != nil {
			return 0, err
		}
	}
	return min(mark, w.limit), nil
}

// replayedCap returns lsn, recorded, capped at replicated.
// A standby's slot waits for the standby to replay the record.
// A position kept back looks again once a check is due.
func (w *watch) replayedCap(ctx context.Context, lsn pglogrepl.LSN) (pglogrepl.LSN, error) {
	if r := w.replicated(lsn); r < lsn && time.Since(w.checked) >= checkpoint.ReportDelay {
		if err := w.check(ctx); err != nil {
			return 0, err
		}
	}
	return w.replicated(lsn), nil
}

// lastRecorded returns the position last recorded in the registry.
func (w *watch) lastRecorded() pglogrepl.LSN { return w.recorded }

// record writes lsn to the registry unless it is recorded already.
func (w *watch) record(ctx context.Context, lsn pglogrepl.LSN) error {
	if lsn <= w.recorded {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, watchTimeout)
	defer cancel()
	got, err := w.reg.Confirm(ctx, w.slot, w.timeline, lsn, w.xminAt(lsn))
	if err != nil {
		return err
	}
	w.recorded = got
	if w.standby == nil || w.primaryToo {
		return nil
	}
	var after string
	if err := w.conn.QueryRow(ctx, "SELECT pg_catalog.pg_current_wal_insert_lsn()::text").Scan(&after); err != nil {
		return fmt.Errorf("read the wal position after the record: %w", err)
	}
	a, err := pglogrepl.ParseLSN(after)
	if err != nil {
		return fmt.Errorf("read the wal position after the record: %w", err)
	}
	if n := len(w.unreplayed); n == maxChecks {
		w.unreplayed[n-1] = recordedAt{lsn: got, after: a} // a standby far behind: wait for the newest
	} else {
		w.unreplayed = append(w.unreplayed, recordedAt{lsn: got, after: a})
	}
	return nil
}

// replicated returns how far of lsn, recorded, may be reported to the replication server.
// A standby's slot may pass only positions whose record the standby replayed.
// A standby may be promoted, the way out of a failed primary.
// Its copy of the record must then not be behind its slot.
// Otherwise walbox would refuse the slot as advanced behind its back.
// Streaming from the primary, all of lsn may be reported.
func (w *watch) replicated(lsn pglogrepl.LSN) pglogrepl.LSN {
	if w.standby == nil || w.primaryToo {
		return lsn
	}
	return min(lsn, w.replayed)
}

// readCreated reads the newest consistent point recorded for any slot in the registry.
func (w *watch) readCreated(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, watchTimeout)
	defer cancel()
	c, err := w.reg.NewestCreated(ctx)
	if err != nil {
		return err
	}
	w.created = c
	return nil
}

// owes reports whether an idle step from rec to to must be recorded all the same.
// Outbox transactions last moved the watermark to m.Moved.
// It is owed when the step passes a point that something waits for the record to pass:
//   - the first check whose xmin horizon passes those transactions, so walbox prune may delete their rows (owesHorizon);
//   - the newest consistent point of a slot in the registry: a reshard's cut, which the old set must pass.
//
// Each is owed once. Other work's WAL alone makes no step owed: only 64 KiB of it is recorded (checkpoint.IdleStep).
// Other relays' records are such WAL. Were they owed, each relay's record would make the others record, for ever.
func (w *watch) owes(rec, to pglogrepl.LSN, m checkpoint.Mark) bool {
	return w.owesHorizon(rec, to, m) || (rec < w.created && w.created <= to)
}

// owesHorizon reports whether an idle step from rec to to must be recorded all the same.
// Outbox transactions last moved the watermark to m.Moved; m.Xid is the newest of their ids.
// The record at rec may carry the horizon of a check made before they ended.
// Other WAL may follow them before the check that lets the slot pass them.
// Or another transaction, open meanwhile, held the horizon back.
// Their rows then look unconfirmed to walbox prune until a record passes a check whose horizon passes m.Xid.
// So one idle step that passes the first such check at or after m.Moved is recorded.
// Later steps pass only WAL that follows that check: the relay's own records among it.
// Recording those would write for ever on an idle database.
func (w *watch) owesHorizon(rec, to pglogrepl.LSN, m checkpoint.Mark) bool {
	if m.Moved == 0 || m.Moved <= w.settled {
		return false
	}
	for _, c := range w.checks {
		if c.wal < m.Moved || !c.passes(m.Xid) {
			continue
		}
		if rec >= c.wal {
			w.settled = m.Moved
			return false
		}
		return c.wal <= to
	}
	return false
}

// passes reports whether the check's xmin horizon is past transaction id xid, or xid is 0.
// A horizon past it is past every row that transaction's top level inserted.
// The circular comparison is PostgreSQL's: live ids lie within 2^31 of each other.
func (c walCheck) passes(xid uint32) bool {
	return xid == 0 || int32(xid-uint32(c.xmin)) < 0
}

// xminAt returns the xmin horizon of the latest check that read a WAL position at or before lsn.
// Any transaction committing after lsn committed after that check, so its id is no lower.
// It returns zero if no check qualifies; the registry then keeps its older, lower horizon.
func (w *watch) xminAt(lsn pglogrepl.LSN) uint64 {
	for i := len(w.checks) - 1; i >= 0; i-- {
		if w.checks[i].wal <= lsn {
			return w.checks[i].xmin
		}
	}
	return 0
}
