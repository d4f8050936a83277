package schedule

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/wire"
)

// standbyWait bounds the wait for the standbys of synchronized_standby_slots to flush a record.
var standbyWait = 30 * time.Second

// flushedSQL reads the primary's WAL flushed so far, which holds the record's commit. It also reads
// the standby slots to wait for, and whether the slot $1 is a failover slot here.
// Before PostgreSQL 17 the setting does not exist.
const flushedSQL = "SELECT pg_catalog.pg_current_wal_flush_lsn()::pg_catalog.text," +
	" coalesce(pg_catalog.current_setting('synchronized_standby_slots', true), '')," +
	" coalesce((SELECT s.failover FROM pg_catalog.pg_replication_slots s WHERE s.slot_name OPERATOR(pg_catalog.=) $1), false)"

// behindSQL lists the slots of the list $2 that have not flushed $1: missing, invalidated, not in
// use, or behind. It is PostgreSQL's own test before a logical walsender sends a change.
// Each name is read as PostgreSQL reads it, an identifier: unquoted, it folds to lower case.
const behindSQL = "SELECT n.name, coalesce(s.restart_lsn::pg_catalog.text, ''), coalesce(s.wal_status, ''), coalesce(s.slot_type, '')" +
	" FROM pg_catalog.unnest(pg_catalog.string_to_array($2::pg_catalog.text, ',')) AS a(raw)" +
	" CROSS JOIN LATERAL (SELECT CASE WHEN pg_catalog.btrim(a.raw, E' \\t\\r\\n') OPERATOR(pg_catalog.=) '' THEN ''" +
	" ELSE (pg_catalog.parse_ident(a.raw))[1] END AS name) AS n" +
	" LEFT JOIN pg_catalog.pg_replication_slots s ON s.slot_name OPERATOR(pg_catalog.=) n.name" +
	" WHERE n.name OPERATOR(pg_catalog.<>) '' AND (s.restart_lsn IS NULL OR s.slot_type OPERATOR(pg_catalog.<>) 'physical'" +
	" OR s.wal_status OPERATOR(pg_catalog.=) 'lost' OR s.restart_lsn OPERATOR(pg_catalog.<) $1::pg_catalog.pg_lsn)"

// awaitStandbys waits until every standby slot of synchronized_standby_slots has flushed the WAL
// of the records just committed. A synced failover slot may pass the row before the record arrives.
// Promoted, that standby would lack the record. It waits at most standbyWait.
// A slot that is not a failover slot here is not synced: PostgreSQL does not hold it back either.
// So its records do not wait. A lagging standby would otherwise stall a relay it cannot affect.
func (r *Recorder) awaitStandbys() error {
	if !r.standbys {
		return nil
	}
	ctx, cancel := r.bounded(standbyWait)
	defer cancel()
	var at, list string
	var failover bool
	if err := r.conn.QueryRow(ctx, flushedSQL, r.slot).Scan(&at, &list, &failover); err != nil {
		return fmt.Errorf("read the WAL position of the record: %w", err)
	}
	if !failover || strings.TrimSpace(list) == "" {
		return nil
	}
	pause := time.Millisecond
	var last []string
	for {
		behind, err := r.behind(ctx, at, list)
		switch {
		case err == nil && len(behind) == 0:
			return nil
		case err == nil:
			last = behind
		case ctx.Err() == nil:
			return fmt.Errorf("read the slots of synchronized_standby_slots = '%s': %w", list, err)
		}
		select {
		case <-time.After(pause):
			pause = min(2*pause, 100*time.Millisecond)
		case <-ctx.Done():
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("the standbys of synchronized_standby_slots = '%s' have not flushed the record at %s within %v: %s",
				list, at, standbyWait, strings.Join(last, ", "))
		}
		if ctx.Err() != nil {
			return fmt.Errorf("wait for synchronized_standby_slots: %w", wire.ErrSessionClosed)
		}
	}
}

// behind returns the slots of list that have not flushed at, each with why.
func (r *Recorder) behind(ctx context.Context, at, list string) ([]string, error) {
	rows, err := r.conn.Query(ctx, behindSQL, at, list)
	if err != nil {
		return nil, err
	}
	var out []string
	var name, restart, status, kind string
	_, err = pgx.ForEachRow(rows, []any{&name, &restart, &status, &kind}, func() error {
		switch {
		case kind == "":
			out = append(out, name+" (no such slot)")
		case kind != "physical":
			out = append(out, name+" (not a physical slot)")
		case status == "lost":
			out = append(out, name+" (invalidated)")
		case restart == "":
			out = append(out, name+" (no standby has used it)")
		default:
			out = append(out, name+" (flushed up to "+restart+")")
		}
		return nil
	})
	return out, err
}

// serverMajor reads the major version of conn's server; 0 if it cannot.
func serverMajor(conn *pgx.Conn) int {
	v := conn.PgConn().ParameterStatus("server_version")
	if i := strings.IndexFunc(v, func(c rune) bool { return c < '0' || c > '9' }); i >= 0 {
		v = v[:i]
	}
	n, _ := strconv.Atoi(v)
	return n
}
