package slots

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/republish"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/wire"
)

// The rows of the gap are those whose inserting transaction may have committed after the recorded
// position. The registry records an xmin horizon with each position. It is the horizon of a
// snapshot taken while the WAL was at or before that position. A transaction committing after the
// position was running then or had no id yet. So its id, and that of each of its subtransactions,
// is no lower than the horizon. Rows whose xmin is at or after the horizon are selected. Some
// committed before the position and are published again: duplicates, never loss. A row's xmin is 32
// bits and wraps around. So it is compared with the 64-bit horizon modulo 2^32. An xmin is "at or
// after" when it is less than 2^31 transactions ahead.
const gapCondition = "((xmin::text::bigint - %d + 4294967296) %% 4294967296) < 2147483648"

// fetchSize is how many rows a cursor fetches at a time.
const fetchSize = 500

// gapTable is one outbox table as recover reads it.
type gapTable struct {
	mapping wire.Mapping
	rows    *decoder.TableRows
	name    string // the quoted table name
	columns string // the select list: every published column as text
	where   string // the gap's rows, under the publication's row filter
}

// prepare checks the mappings and the publication and builds the queries, once.
func (r *Recovery) prepare(ctx context.Context, g Gap) error {
	if r.tables != nil {
		return nil
	}
	cond, err := r.gapCondition(ctx, g)
	if err != nil {
		return err
	}
	dec := decoder.New(r.cfg.Mappings...)
	var tables []*gapTable
	for _, m := range r.cfg.Mappings {
		if m.MessageID == wire.IDFromPosition {
			return fmt.Errorf("%w: table %s takes its message ids from commit positions (message-id: position), and a row read "+
				"from the table has none, so it cannot be republished with the id the relay would have given it. "+
				"Consumers could not deduplicate it; recover refuses rather than publish it under a new id", errPositionIDs, m.Table)
		}
		t, err := r.table(ctx, dec, m, cond)
		if err != nil {
			return err
		}
		tables = append(tables, t)
	}
	r.tables = tables
	r.record = g.Record
	if !r.cfg.AllRows {
		r.rewrite = cond
	}
	return nil
}

// gapCondition returns the SQL condition that selects the rows of the gap.
func (r *Recovery) gapCondition(ctx context.Context, g Gap) (string, error) {
	if r.cfg.AllRows {
		return "true", nil
	}
	bound, ok := g.lowerBound()
	if !ok {
		why := "the slot was adopted (found, not created, by walbox) and walbox never confirmed a position on it"
		if g.State == SlotOtherSystem {
			why = "the record comes from another server (system identifier " + g.Record.SystemID +
				"), whose transaction ids mean nothing here"
		}
		return "", fmt.Errorf("%w: the record of slot %s holds no transaction horizon to tell the rows of the gap by: %s. "+
			"Run again with --all-rows to republish every row of the outbox tables (consumers deduplicate by id)",
			errNoLowerBound, r.cfg.Slot, why)
	}
	var next string
	if err := r.db.QueryRow(ctx, "SELECT pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text").Scan(&next); err != nil {
		return "", fmt.Errorf("read the next transaction id: %w", err)
	}
	n, err := strconv.ParseUint(next, 10, 64)
	if err != nil {
		return "", fmt.Errorf("read the next transaction id %q: %w", next, err)
	}
	if bound > n || n-bound >= 1<<31 {
		return "", fmt.Errorf("%w: the recorded horizon, transaction %d, is too far from the next one, %d, to compare row ids "+
			"with it. Run again with --all-rows to republish every row of the outbox tables", errNoLowerBound, bound, n)
	}
	return fmt.Sprintf(gapCondition, bound%(1<<32)), nil
}

// table reads what the publication publishes of m's table: its columns, its row filter. It prepares
// the table's decoding and queries.
func (r *Recovery) table(ctx context.Context, dec *decoder.Decoder, m wire.Mapping, cond string) (*gapTable, error) {
	var (
		published []string
		filter    string
		inserts   bool
	)
	err := r.db.QueryRow(ctx, `SELECT t.attnames, coalesce(t.rowfilter, ''), p.pubinsert
		FROM pg_publication_tables t JOIN pg_publication p ON p.pubname = t.pubname
		WHERE t.pubname = $1 AND t.schemaname = $2 AND t.tablename = $3`,
		r.cfg.Publication, m.Table.Schema, m.Table.Name).Scan(&published, &filter, &inserts)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("%w: publication %q does not contain table %s; the new slot would stream nothing of it. "+
			"Fix the publication first (walbox migrate, or ALTER PUBLICATION ... ADD TABLE)", inspect.ErrNotCovered, r.cfg.Publication, m.Table)
	case err != nil:
		return nil, fmt.Errorf("read publication %s: %w", r.cfg.Publication, err)
	case !inserts:
		return nil, fmt.Errorf("%w: publication %q does not publish inserts; fix it first (ALTER PUBLICATION %s SET (publish = 'insert'))",
			inspect.ErrNotCovered, r.cfg.Publication, quoteIdent(r.cfg.Publication))
	}
	name := pgx.Identifier{m.Table.Schema, m.Table.Name}.Sanitize()
	cols, err := republish.Columns(ctx, r.db, name, published)
	if err != nil {
		return nil, err
	}
	rows, err := dec.Rows(m.Table.Schema, m.Table.Name, cols)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", m.Table, err)
	}
	list := make([]string, len(cols))
	for i, c := range cols {
		list[i] = pgx.Identifier{c.Name}.Sanitize() + "::text"
	}
	if filter != "" {
		cond += " AND (" + filter + ")"
	}
	return &gapTable{mapping: m, rows: rows, name: name, columns: strings.Join(list, ", "), where: cond}, nil
}

// count counts, per table, the rows of the gap and whether the table is empty.
func (r *Recovery) count(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) ([]Count, error) {
	counts := make([]Count, len(r.tables))
	for i, t := range r.tables {
		counts[i].Table = t.mapping.Table
		err := q.QueryRow(ctx, "SELECT pg_catalog.count(*) FILTER (WHERE "+t.where+"), pg_catalog.count(*) = 0 FROM "+t.name).
			Scan(&counts[i].Rows, &counts[i].Empty)
		if err != nil {
			return nil, fmt.Errorf("count the rows of %s: %w", t.mapping.Table, err)
		}
		// Deletes happen on the primary, and its statistics count them.
		d, err := registry.ReadDeletes(ctx, r.db, r.reg.Schema(), t.mapping.Table, r.cfg.Slot)
		if err != nil {
			return nil, err
		}
		counts[i].Deleted = d.Unexplained()
		counts[i].Unseen = r.unseen(d.Began)
		if counts[i].Rewritten, err = r.rewritten(ctx, t.mapping.Table); err != nil {
			return nil, err
		}
	}
	return counts, nil
}

// unseen says why deletes may have gone uncounted since the gap may have begun, or "". It is given
// when the statistics began counting. Rows of the gap committed after the record's first position,
// reached before the record began. Deletes before the statistics began are not in the statistics. A
// server that switched timelines since the record's last confirm counts none of some deletes. Those
// are the deletes made on the server it took over from.
func (r *Recovery) unseen(began time.Time) string {
	rec := r.record
	switch {
	case rec.Timeline != 0 && rec.Timeline != r.sys.Timeline:
		return fmt.Sprintf("the server is on timeline %d and walbox last confirmed on timeline %d: a standby promoted (or a backup "+
			"restored) since counts none of the deletes made before on the server it took over from", r.sys.Timeline, rec.Timeline)
	case !began.IsZero() && began.After(rec.FirstRecorded):
		return fmt.Sprintf("the server's statistics began counting again at %s (a crash, pg_stat_reset, or a server started since), "+
			"after walbox's record of slot %s began at %s: deletes before then are not counted",
			began.UTC().Format(time.RFC3339), rec.Slot, rec.FirstRecorded.UTC().Format(time.RFC3339))
	}
	return ""
}

// rewritten reports whether the table, or one of its partitions, has a new catalog row and file. A
// transaction that may have committed after the recorded position wrote that row. And the file is
// another than the one the table was created with. A TRUNCATE in the gap gives the table a new
// file, and so a new pg_class row. And the statistics do not count its rows. A table keeps its
// first file, numbered as its oid, until TRUNCATE, VACUUM FULL or CLUSTER. So a partition created
// in the gap is no sign, nor a GRANT on a table never rewritten. A table created or renamed in the
// gap, in place of another, is a sign. A dropped partition leaves no trace here.
func (r *Recovery) rewritten(ctx context.Context, t wire.Table) (bool, error) {
	if r.rewrite == "" {
		return false, nil
	}
	// The table's row type is created with it and renamed with it, and nothing else writes it. If
	// it was written in the gap, the table was created, or renamed into its name, in the gap. It
	// took the place of the one whose rows of the gap went with it.
	var changed bool
	err := r.db.QueryRow(ctx, `SELECT coalesce((SELECT pg_catalog.bool_or(`+r.rewrite+`) FROM pg_catalog.pg_class
		WHERE relfilenode OPERATOR(pg_catalog.<>) 0 AND relfilenode OPERATOR(pg_catalog.<>) oid AND oid IN (SELECT pg_catalog.to_regclass($1)::pg_catalog.oid
			UNION SELECT p.relid::pg_catalog.oid FROM pg_catalog.pg_partition_tree(pg_catalog.to_regclass($1)) AS p)), false)
		OR coalesce((SELECT `+r.rewrite+` FROM pg_catalog.pg_type WHERE oid OPERATOR(pg_catalog.=)
			(SELECT c.reltype FROM pg_catalog.pg_class AS c WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1)::pg_catalog.oid)), false)`,
		t.Quoted()).Scan(&changed)
	if err != nil {
		return false, fmt.Errorf("read the catalog row of %s: %w", t, err)
	}
	return changed, nil
}

// eachRow calls fn with the text values of every row of the gap, across the tables. The rows come
// in the order of their inserting transactions' ids, oldest first. Within one transaction they come
// in the order of the inserting statements (cmin), across the tables. Rows of one statement (a COPY,
// a multi-row INSERT) come in the table's physical order. That is their insert order, unless the
// statement filled free space on an earlier page. A vacuum leaves such space after a rollback or a
// prune. The physical order alone put a later statement's row before an earlier one's there.
// Transaction ids are assigned in start order, not commit order. So concurrent transactions may
// come out of commit order.
func (r *Recovery) eachRow(ctx context.Context, tx pgx.Tx, fn func(t *gapTable, values [][]byte) error) error {
	cursors := make([]*cursor, len(r.tables))
	for i, t := range r.tables {
		c := &cursor{table: t, name: "walbox_gap_" + strconv.Itoa(i)}
		// cmin is the inserting statement's command id: rows are never updated, so it is no combo id.
		_, err := tx.Exec(ctx, "DECLARE "+c.name+" NO SCROLL CURSOR FOR SELECT pg_catalog.age(xmin)::text, cmin::pg_catalog.text, "+t.columns+
			" FROM "+t.name+" WHERE "+t.where+" ORDER BY pg_catalog.age(xmin) DESC, cmin::pg_catalog.text::pg_catalog.int8, ctid")
		if err != nil {
			return fmt.Errorf("select the rows of %s: %w", t.mapping.Table, err)
		}
		cursors[i] = c
	}
	for {
		var next *cursor
		for _, c := range cursors {
			if err := c.fill(ctx, tx); err != nil {
				return err
			}
			if len(c.buf) > 0 && (next == nil || c.buf[0].before(next.buf[0])) {
				next = c
			}
		}
		if next == nil {
			return nil
		}
		row := next.buf[0]
		next.buf = next.buf[1:]
		if err := fn(next.table, row.values); err != nil {
			return err
		}
	}
}

// cursor reads one table's rows of the gap in batches.
type cursor struct {
	table *gapTable
	name  string
	buf   []gapRow
	done  bool
}

// gapRow is a row of the gap. It holds its transaction's age (larger is older), its inserting
// statement (cmin) and its column values as text.
type gapRow struct {
	age, cmd int64
	values   [][]byte
}

// before reports whether r was inserted before o. Either its transaction is older, or its
// statement came earlier in the same one.
func (r gapRow) before(o gapRow) bool {
	return r.age > o.age || r.age == o.age && r.cmd < o.cmd
}

// fill fetches the next batch once the buffer is empty.
func (c *cursor) fill(ctx context.Context, tx pgx.Tx) error {
	if len(c.buf) > 0 || c.done {
		return nil
	}
	rows, err := tx.Query(ctx, "FETCH "+strconv.Itoa(fetchSize)+" FROM "+c.name)
	if err != nil {
		return fmt.Errorf("read the rows of %s: %w", c.table.mapping.Table, err)
	}
	defer rows.Close()
	for rows.Next() {
		raw := rows.RawValues()
		age, err := strconv.ParseInt(string(raw[0]), 10, 64)
		if err != nil {
			return fmt.Errorf("read the rows of %s: age %q: %w", c.table.mapping.Table, raw[0], err)
		}
		cmd, err := strconv.ParseInt(string(raw[1]), 10, 64)
		if err != nil {
			return fmt.Errorf("read the rows of %s: cmin %q: %w", c.table.mapping.Table, raw[1], err)
		}
		row := gapRow{age: age, cmd: cmd, values: make([][]byte, len(raw)-2)}
		for i, v := range raw[2:] {
			if v != nil {
				row.values[i] = append([]byte{}, v...)
			}
		}
		c.buf = append(c.buf, row)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the rows of %s: %w", c.table.mapping.Table, err)
	}
	c.done = len(c.buf) < fetchSize
	return nil
}
