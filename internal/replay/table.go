package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/internal/republish"
	"github.com/walbox/walbox/wire"
)

// ErrPositionIDs: the table's message ids come from commit positions, which a row read from the
// table does not have.
var ErrPositionIDs = errors.New("message ids from commit positions")

// ErrNoColumn: a filter names a role the table's mapping has no column for.
var ErrNoColumn = errors.New("no column to filter on")

// table is one outbox table as the replay reads it.
type table struct {
	index   int // its place among the replay's tables
	mapping wire.Mapping
	rows    *decoder.TableRows
	// query selects the rows: the key (transaction, statement, place), the commit time, then the
	// columns as text. A cursor held past its transaction reads it.
	// Its parameters: the horizon ($1), the cursor ($2 to $4), the start's snapshot ($5). Then the
	// filter's values (args).
	query string
	// count counts the rows after the cursor; its parameters are the query's.
	count string
	args  []any
}

// params numbers the filter's values from $6, after the horizon, the cursor and the snapshot.
type params struct{ args []any }

// add returns the parameter of v, cast to typ.
func (p *params) add(v any, typ string) string {
	p.args = append(p.args, v)
	return fmt.Sprintf("$%d::pg_catalog.%s", len(p.args)+5, typ)
}

// nextXID is the next transaction id as the query's own snapshot sees it. Every row it reads is
// older.
const nextXID = `(SELECT pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::pg_catalog.text::pg_catalog.int8)`

// keyColumns selects each row's key from a table. That is its transaction's full id, told from xmin
// and nextXID. Then its statement's command id, then its place. The row's xmin is 32 bits: the key
// is the newest id below nextXID with those bits. A frozen row keeps its xmin, so the key is exact
// for rows younger than 2^32 transactions. Older ones get a newer id of the same bits.
const keyColumns = nextXID + ` - ((` + nextXID + ` % 4294967296 - xmin::pg_catalog.text::pg_catalog.int8 + 4294967296) % 4294967296) AS k,
	cmin::pg_catalog.text::pg_catalog.int8 AS c, ctid AS t`

// commitColumn selects a row's commit time in microseconds since 1970, where the server tracks it.
const commitColumn = `(EXTRACT(EPOCH FROM pg_catalog.pg_xact_commit_timestamp(xmin)) * 1000000)::pg_catalog.int8 AS ct`

// afterCursor keeps the rows after the cursor, of transactions that had ended when the replay
// started. Those are before the horizon (the next transaction id then). And they were not running
// in the start's snapshot. Later rows are the relay's news. A row kept longer than 2^31
// transactions is frozen, and still before the horizon: it is kept too.
const afterCursor = `q.k < $1::pg_catalog.int8
	AND pg_catalog.pg_visible_in_snapshot(q.k::pg_catalog.text::pg_catalog.xid8, $5::pg_catalog.pg_snapshot)
	AND (q.k, q.c, q.t) > ($2::pg_catalog.int8, $3::pg_catalog.int8, $4::pg_catalog.tid)`

// newTable reads what it needs of m's table and builds its queries. commitTime says whether the
// server tracks commit times.
func newTable(ctx context.Context, conn *pgx.Conn, dec *decoder.Decoder, m wire.Mapping, publication string,
	f Filter, commitTime bool) (*table, error) {
	if m.MessageID == wire.IDFromPosition {
		return nil, fmt.Errorf("%w: table %s takes its message ids from commit positions (message-id: position); a row read "+
			"from the table has none, so it would go out under another id, which consumers could not deduplicate", ErrPositionIDs, m.Table)
	}
	name := m.Table.Quoted()
	published, rowFilter, err := publicationOf(ctx, conn, publication, m.Table)
	if err != nil {
		return nil, err
	}
	cols, err := republish.Columns(ctx, conn, name, published)
	if err != nil {
		return nil, err
	}
	rows, err := dec.Rows(m.Table.Schema, m.Table.Name, cols)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", m.Table, err)
	}
	var p params
	where, err := conditions(m, f, commitTime, cols, &p)
	if err != nil {
		return nil, err
	}
	if rowFilter != "" {
		where = append(where, "("+rowFilter+")")
	}
	list := make([]string, len(cols))
	for i, c := range cols {
		list[i] = fmt.Sprintf("%s::pg_catalog.text AS v%d", pgx.Identifier{c.Name}.Sanitize(), i)
	}
	commit := "NULL::pg_catalog.int8 AS ct"
	if commitTime {
		commit = commitColumn
	}
	inner := "SELECT " + keyColumns + ", " + commit + ", " + strings.Join(list, ", ") + " FROM " + name
	if len(where) > 0 {
		inner += " WHERE " + strings.Join(where, " AND ")
	}
	values := make([]string, len(cols))
	for i := range cols {
		values[i] = fmt.Sprintf("q.v%d", i)
	}
	return &table{mapping: m, rows: rows, args: p.args,
		query: "SELECT q.k::pg_catalog.text, q.c::pg_catalog.text, q.t::pg_catalog.text, q.ct::pg_catalog.text, " + strings.Join(values, ", ") + " FROM (" + inner + ") AS q WHERE " +
			afterCursor + " ORDER BY q.k, q.c, q.t",
		count: "SELECT pg_catalog.count(*) FROM (" + inner + ") AS q WHERE " + afterCursor,
	}, nil
}

// publicationOf returns the columns the publication publishes of t and its row filter. A sharded
// table's shards have publications of their own. A table the publication lacks gives nil and "":
// every column and every row.
func publicationOf(ctx context.Context, conn *pgx.Conn, publication string, t wire.Table) ([]string, string, error) {
	var (
		published []string
		filter    string
	)
	err := conn.QueryRow(ctx, `SELECT attnames, coalesce(rowfilter, '') FROM pg_catalog.pg_publication_tables
		WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`, publication, t.Schema, t.Name).Scan(&published, &filter)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, "", nil
	case err != nil:
		return nil, "", fmt.Errorf("read publication %s: %w", publication, err)
	}
	return published, filter, nil
}

// conditions returns the filter's conditions on m's table, whose columns are cols. Their values go
// into p.
func conditions(m wire.Mapping, f Filter, commitTime bool, cols []decoder.Column, p *params) ([]string, error) {
	has := func(col string) bool {
		for _, c := range cols {
			if c.Name == col {
				return true
			}
		}
		return false
	}
	var where []string
	for _, c := range []struct{ role, col, value string }{
		{"aggregate type", m.AggregateType, f.AggregateType},
		{"aggregate id", m.AggregateID, f.AggregateID},
		{"event type", m.EventType, f.EventType},
	} {
		if c.value == "" {
			continue
		}
		if c.col == wire.Absent || !has(c.col) {
			return nil, fmt.Errorf("%w: table %s has no %s column", ErrNoColumn, m.Table, c.role)
		}
		where = append(where, pgx.Identifier{c.col}.Sanitize()+"::pg_catalog.text OPERATOR(pg_catalog.=) "+p.add(c.value, "text"))
	}
	// A row due later waits in the relay's schedule, which sends it when due: not before.
	if m.DeliverAt != wire.Absent && has(m.DeliverAt) {
		col := pgx.Identifier{m.DeliverAt}.Sanitize() + "::pg_catalog.timestamptz"
		where = append(where, "("+col+" IS NULL OR "+col+" OPERATOR(pg_catalog.<=) pg_catalog.now())")
	}
	if !f.timed() {
		return where, nil
	}
	at, err := timeOf(m, commitTime, has)
	if err != nil {
		return nil, err
	}
	if !f.Since.IsZero() {
		where = append(where, at+" OPERATOR(pg_catalog.>=) "+p.add(f.Since, "timestamptz"))
	}
	if !f.Until.IsZero() {
		where = append(where, at+" OPERATOR(pg_catalog.<) "+p.add(f.Until, "timestamptz"))
	}
	return where, nil
}

// timeOf returns the expression of a row's time: its commit time where the server tracks it. Else,
// or for rows committed before it did, it is the mapped created_at column.
func timeOf(m wire.Mapping, commitTime bool, has func(string) bool) (string, error) {
	created := ""
	if m.CreatedAt != wire.Absent && has(m.CreatedAt) {
		created = pgx.Identifier{m.CreatedAt}.Sanitize() + "::pg_catalog.timestamptz"
	}
	switch {
	case commitTime && created != "":
		return "coalesce(pg_catalog.pg_xact_commit_timestamp(xmin), " + created + ")", nil
	case commitTime:
		return "pg_catalog.pg_xact_commit_timestamp(xmin)", nil
	case created != "":
		return created, nil
	}
	return "", fmt.Errorf("%w: table %s has no created_at column, and the server does not track commit times "+
		"(track_commit_timestamp is off), so --since and --until have nothing to compare", ErrNoColumn, m.Table)
}
