package replication

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/inspect"
)

// errTwoServers means the replication connection and the SQL connection reach different servers.
// A multi-host URL or a load balancer paired them.
// Walbox would check and record on one server, and stream from the other.
var errTwoServers = errors.New("the replication connection and the SQL connection reach different servers")

// system is what a server says of itself: its system identifier and, on a primary, its timeline.
type system struct {
	id       string
	timeline int32 // 0 on a standby: a standby's SQL shows no replay timeline
}

// readSystem reads the system identifier and, on a primary, the timeline WAL is written on, which
// IDENTIFY_SYSTEM reports there too.
func readSystem(ctx context.Context, q inspect.Querier) (system, error) {
	var s system
	var tli *string
	err := q.QueryRow(ctx, `SELECT s.system_identifier::text, CASE WHEN pg_catalog.pg_is_in_recovery() THEN NULL
			ELSE pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_insert_lsn()), 1, 8) END
		FROM pg_catalog.pg_control_system() AS s`).Scan(&s.id, &tli)
	if err != nil {
		return s, fmt.Errorf("read the server's system identifier: %w", err)
	}
	if tli != nil {
		t, err := strconv.ParseUint(*tli, 16, 32)
		if err != nil {
			return s, fmt.Errorf("read the server's timeline: %q: %w", *tli, err)
		}
		s.timeline = int32(t)
	}
	return s, nil
}

// checkOneServer makes sure the session's connections reach one server.
// IDENTIFY_SYSTEM on the replication connection (sys) and the watch's SQL connections report it.
// Without --replication-url both connections are --database-url's.
// Their system identifier and timeline must match.
// With it, the replication server is a standby of the --database-url primary, or the primary itself.
// The system identifier is the same on that connection and on the SQL connection to the standby.
// A standby's timeline may trail its primary's for a while.
// Last, the replication connection and the SQL connection that reads the slot must reach one running server.
// Two standbys of one primary, or a restored copy, share the rest (see serverStart).
func (w *watch) checkOneServer(ctx context.Context, repl *pgconn.PgConn, sys pglogrepl.IdentifySystemResult) error {
	ctx, cancel := context.WithTimeout(ctx, watchTimeout)
	defer cancel()
	primary, err := readSystem(ctx, w.conn)
	if err != nil {
		return err
	}
	if w.standby == nil {
		if primary.id != sys.SystemID || primary.timeline != sys.Timeline {
			return fatal(fmt.Errorf("%w: the replication connection reports system identifier %s, timeline %d; the SQL connection "+
				"reports %s, timeline %d. A multi-host --database-url or a load balancer paired two servers: point "+
				"--database-url at one server, the primary", errTwoServers, sys.SystemID, sys.Timeline, primary.id, primary.timeline))
		}
		return w.checkOneStart(ctx, repl)
	}
	if primary.id != sys.SystemID {
		return fatal(fmt.Errorf("%w: the --replication-url server reports system identifier %s, timeline %d; the --database-url "+
			"server reports %s: it is no standby of that primary. Point --replication-url at a standby of the --database-url "+
			"server", errTwoServers, sys.SystemID, sys.Timeline, primary.id))
	}
	standby, err := readSystem(ctx, w.standby)
	if err != nil {
		return fmt.Errorf("standby: %w", err)
	}
	if standby.id != sys.SystemID {
		return fatal(fmt.Errorf("%w: the replication connection to --replication-url reports system identifier %s, timeline %d; "+
			"the SQL connection to it reports %s. A multi-host --replication-url or a load balancer paired two servers: point "+
			"--replication-url at one server", errTwoServers, sys.SystemID, sys.Timeline, standby.id))
	}
	return w.checkOneStart(ctx, repl)
}

// startTime reads when the server's postmaster started, in UTC to the microsecond.
// Two servers of one system share their system identifier, and may share their timeline.
// They never share their start.
// Such servers are standbys of one primary, a restored copy, or two promoted standbys.
// It runs as SQL on the logical replication connection, and on an ordinary one alike.
// A walsender with a database takes SQL before START_REPLICATION.
const startTime = `pg_catalog.to_char(pg_catalog.timezone('UTC', pg_catalog.pg_postmaster_start_time()), ` +
	`'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`

// checkOneStart makes sure two connections reach one running server.
// They are the replication connection and the SQL connection that reads the slot (slotDB).
// A multi-host URL or a load-balanced service may pair two servers of one system.
// A read-only service over several standbys is one example.
// Walbox would check the slot on one and stream from the other.
// It also keeps the walsender's process id as the server gives it (w.walsender).
// That is the process slots.CheckHeld finds holding the slot.
func (w *watch) checkOneStart(ctx context.Context, repl *pgconn.PgConn) error {
	res, err := repl.Exec(ctx, "SELECT "+startTime+", pg_catalog.pg_backend_pid()").ReadAll()
	if err != nil {
		return fmt.Errorf("read the replication server's start time: %w", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 2 {
		return errors.New("read the replication server's start time: no row")
	}
	replStart := string(res[0].Rows[0][0])
	pid, err := strconv.ParseUint(string(res[0].Rows[0][1]), 10, 32)
	if err != nil {
		return fmt.Errorf("read the walsender's process id: %w", err)
	}
	w.walsender = uint32(pid)
	var sqlStart string
	if err := w.slotDB().QueryRow(ctx, "SELECT "+startTime).Scan(&sqlStart); err != nil {
		return fmt.Errorf("read the server's start time: %w", err)
	}
	if replStart == sqlStart {
		return nil
	}
	url := "--database-url"
	if w.standby != nil {
		url = "--replication-url"
	}
	return fatal(fmt.Errorf("%w: the replication connection to %s reaches a server started at %s; the SQL connection to it "+
		"reaches one started at %s, of the same system. A multi-host %s or a load-balanced service paired two servers "+
		"(standbys of one primary, promoted or not, or a restored copy): point %s at one server",
		errTwoServers, url, replStart, sqlStart, url, url))
}

// senderTimeout reads wal_sender_timeout as the walsender of repl has it.
// The server drops repl after that much silence.
// With --replication-url the walsender runs on another server than the SQL connection.
// A connection may also set its own (options=-c wal_sender_timeout=...).
func senderTimeout(ctx context.Context, repl *pgconn.PgConn) (time.Duration, error) {
	res, err := repl.Exec(ctx, "SELECT setting FROM pg_catalog.pg_settings WHERE name = 'wal_sender_timeout'").ReadAll()
	if err != nil {
		return 0, fmt.Errorf("read the walsender's wal_sender_timeout: %w", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return 0, errors.New("read the walsender's wal_sender_timeout: no row")
	}
	ms, err := strconv.ParseInt(string(res[0].Rows[0][0]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read the walsender's wal_sender_timeout: %w", err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
