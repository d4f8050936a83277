package replay

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/ownertrust"
	"github.com/walbox/walbox/migrations"
)

// ProgressTable is the table walbox replay keeps its progress in, in the outbox table's schema.
const ProgressTable = "walbox_replays"

// ErrRunning: the same replay runs elsewhere, holding its lock.
var ErrRunning = errors.New("the replay is running elsewhere")

// ErrNoProgressTable: walbox_replays is missing and this role cannot create it.
var ErrNoProgressTable = errors.New("walbox_replays is missing")

// progress is the record of one table of a replay: the last statement confirmed whole, and the
// rows confirmed.
type progress struct {
	horizon  int64  // the next transaction id when the replay started
	snapshot string // the snapshot then: the transactions running are left out
	doneXID  int64
	doneCmd  int64
	sent     int64
	found    bool
}

// store reads and writes walbox_replays.
type store struct {
	conn  *pgx.Conn
	table string // quoted, with its schema
	id    string
}

// ensureTable creates walbox_replays where it is missing, as walbox migrate would. It refuses one
// owned by a role not trusted to run code as this one.
func (s *store) ensureTable(ctx context.Context, schema string) error {
	var exists bool
	if err := s.conn.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1::pg_catalog.text) IS NOT NULL", s.table).Scan(&exists); err != nil {
		return fmt.Errorf("look for %s: %w", s.table, err)
	}
	if !exists {
		if _, err := migrations.ApplyRegistry(ctx, s.conn, schema); err != nil {
			return fmt.Errorf("%w: %s is missing and this role cannot create it (%v); run `walbox migrate` as the outbox table's owner",
				ErrNoProgressTable, s.table, err)
		}
	}
	return ownertrust.Check(ctx, s.conn, s.table, "replay")
}

// lockWait is how long a run waits for the replay's lock before it refuses. A killed run's
// session ends within clientCheck; this covers it.
const lockWait = 3 * time.Second

// clientCheck is how often the server checks that a replay's client is still there
// (client_connection_check_interval). It does so also while a query runs or waits on a lock. A
// killed run's session ends then, and its lock with it.
const clientCheck = time.Second

// lock takes the replay's advisory lock for the session, or says who holds it. It waits up to
// lockWait for the session of a run just killed to end.
func (s *store) lock(ctx context.Context) error {
	raw, err := hex.DecodeString(s.id)
	if err != nil || len(raw) < 8 {
		return fmt.Errorf("replay id %q: not 16 hex digits", s.id)
	}
	key := int64(binary.BigEndian.Uint64(raw))
	deadline := time.Now().Add(lockWait)
	for {
		var ok bool
		if err := s.conn.QueryRow(ctx, "SELECT pg_catalog.pg_try_advisory_lock($1::pg_catalog.int8)", key).Scan(&ok); err != nil {
			return fmt.Errorf("lock replay %s: %w", s.id, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: replay %s (the same tables and filters) is running in another walbox replay; "+
				"wait for it, or stop it and run this one again to resume", ErrRunning, s.id)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("lock replay %s: %w", s.id, ctx.Err())
		}
	}
}

// read returns the progress of the replay on table.
func (s *store) read(ctx context.Context, table string) (progress, error) {
	var p progress
	err := s.conn.QueryRow(ctx, "SELECT horizon, snapshot, done_xid, done_cmd, sent FROM "+s.table+
		" WHERE replay_id = $1::pg_catalog.text AND table_name = $2::pg_catalog.text", s.id, table).
		Scan(&p.horizon, &p.snapshot, &p.doneXID, &p.doneCmd, &p.sent)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return progress{doneCmd: -1}, nil
	case err != nil:
		return progress{}, fmt.Errorf("read %s: %w", s.table, err)
	}
	p.found = true
	return p, nil
}

// startSnapshot reads the current snapshot, its next transaction id (the horizon) and the ids in
// progress. A snapshot lists only top-level transactions. A subtransaction's id, released by its
// savepoint, is not in it, and pg_visible_in_snapshot calls it ended. The ids in progress name them.
const startSnapshot = `SELECT pg_catalog.pg_snapshot_xmax(s)::pg_catalog.text::pg_catalog.int8, s::pg_catalog.text,
	ARRAY(SELECT x FROM pg_catalog.generate_series(pg_catalog.pg_snapshot_xmin(s)::pg_catalog.text::pg_catalog.int8,
			pg_catalog.pg_snapshot_xmax(s)::pg_catalog.text::pg_catalog.int8 - 1) AS x
		WHERE pg_catalog.pg_xact_status(x::pg_catalog.text::pg_catalog.xid8) OPERATOR(pg_catalog.=) 'in progress')
	FROM pg_catalog.pg_current_snapshot() AS s`

// start records the replay's start on each table, in one transaction. The start is the current
// snapshot, with every id in progress added, and its next transaction id, the horizon.
func (s *store) start(ctx context.Context, tables []string, filter string) (progress, error) {
	p := progress{doneCmd: -1, found: true}
	err := pgx.BeginFunc(ctx, s.conn, func(tx pgx.Tx) error {
		var running []int64
		if err := tx.QueryRow(ctx, startSnapshot).Scan(&p.horizon, &p.snapshot, &running); err != nil {
			return fmt.Errorf("read the current snapshot: %w", err)
		}
		var err error
		if p.snapshot, err = withRunning(p.snapshot, running); err != nil {
			return err
		}
		for _, t := range tables {
			_, err := tx.Exec(ctx, "INSERT INTO "+s.table+" (replay_id, table_name, filters, horizon, snapshot) VALUES "+
				"($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.text, $4::pg_catalog.int8, $5::pg_catalog.text)",
				s.id, t, filter, p.horizon, p.snapshot)
			if err != nil {
				return fmt.Errorf("record replay %s in %s: %w", s.id, s.table, err)
			}
		}
		return nil
	})
	return p, err
}

// record moves the replay on table past the statement (xid, cmd), with sent rows confirmed.
func (s *store) record(ctx context.Context, table string, xid, cmd, sent int64) error {
	tag, err := s.conn.Exec(ctx, "UPDATE "+s.table+" SET done_xid = $3::pg_catalog.int8, done_cmd = $4::pg_catalog.int8, "+
		"sent = $5::pg_catalog.int8, updated_at = pg_catalog.now() WHERE replay_id = $1::pg_catalog.text AND table_name = $2::pg_catalog.text",
		s.id, table, xid, cmd, sent)
	if err != nil {
		return fmt.Errorf("record the progress of replay %s: %w", s.id, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("record the progress of replay %s: its row of %s is gone from %s", s.id, table, s.table)
	}
	return nil
}

// finish deletes the replay's progress: the same replay later starts again.
func (s *store) finish(ctx context.Context) error {
	if _, err := s.conn.Exec(ctx, "DELETE FROM "+s.table+" WHERE replay_id = $1::pg_catalog.text", s.id); err != nil {
		return fmt.Errorf("delete the finished replay %s from %s: %w", s.id, s.table, err)
	}
	return nil
}

// withRunning returns the snapshot (xmin:xmax:xip, as pg_snapshot prints it) with the ids running
// added to its list. Ids outside xmin to xmax are left out, as the snapshot would have them.
func withRunning(snapshot string, running []int64) (string, error) {
	parts := strings.Split(snapshot, ":")
	if len(parts) != 3 {
		return "", fmt.Errorf("snapshot %q: not xmin:xmax:xip", snapshot)
	}
	xmin, err1 := strconv.ParseInt(parts[0], 10, 64)
	xmax, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return "", fmt.Errorf("snapshot %q: %w", snapshot, err)
	}
	xip := slices.Clone(running)
	for _, v := range strings.Split(parts[2], ",") {
		if v == "" {
			continue
		}
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return "", fmt.Errorf("snapshot %q: %w", snapshot, err)
		}
		xip = append(xip, x)
	}
	xip = slices.DeleteFunc(xip, func(x int64) bool { return x < xmin || x >= xmax })
	slices.Sort(xip)
	list := make([]string, 0, len(xip))
	for _, x := range slices.Compact(xip) {
		list = append(list, strconv.FormatInt(x, 10))
	}
	return parts[0] + ":" + parts[1] + ":" + strings.Join(list, ","), nil
}
