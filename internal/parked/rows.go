package parked

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/wire"
)

// rows reads a parked row's current version from its outbox table, by its id. It makes of it what
// the relay makes of the same row (decoder.TableRows).
type rows struct {
	db     *pgx.Conn
	dec    *decoder.Decoder
	maps   map[string]wire.Mapping
	tables map[string]*table // prepared, by table name; nil: the table cannot be read by id
}

// now reads the database's clock. Without a database it is the host's.
func (r *rows) now(ctx context.Context) (time.Time, error) {
	if r.db == nil {
		return time.Now(), nil
	}
	var t time.Time
	if err := r.db.QueryRow(ctx, "SELECT pg_catalog.clock_timestamp()").Scan(&t); err != nil {
		return t, fmt.Errorf("read the database's clock for deliver_at: %w", err)
	}
	return t, nil
}

// table is one outbox table as replay reads it.
type table struct {
	rows  *decoder.TableRows
	query string
}

func newRows(db *pgx.Conn, mappings []wire.Mapping) *rows {
	r := &rows{db: db, dec: decoder.New(mappings...), maps: map[string]wire.Mapping{}, tables: map[string]*table{}}
	for _, m := range mappings {
		m = m.WithDefaults()
		r.maps[m.Table.String()] = m
	}
	return r
}

// read returns the row of table whose message id is id. found is false without a database. It is
// false for a table that is not an outbox table, or takes its ids from positions. It is false for a
// row deleted since. It is false for a row created at another second than created, where both are
// known. Such a row took the id later, say after a TRUNCATE that restarted the identity. A row that
// can never become a message is an error wrapping decoder.ErrBadRow.
func (r *rows) read(ctx context.Context, name, id string, created time.Time) (m wire.Message, found bool, err error) {
	if r.db == nil {
		return m, false, nil
	}
	t, ok := r.tables[name]
	if !ok {
		if t, err = r.prepare(ctx, name); err != nil {
			return m, false, err
		}
		r.tables[name] = t
	}
	if t == nil {
		return m, false, nil
	}
	rs, err := r.db.Query(ctx, t.query, id)
	if err != nil {
		return m, false, fmt.Errorf("read row %s of %s: %w", id, name, err)
	}
	defer rs.Close()
	values, err := pgx.CollectRows(rs, func(row pgx.CollectableRow) ([][]byte, error) {
		raw := row.RawValues()
		out := make([][]byte, len(raw))
		for i, v := range raw {
			if v != nil {
				out[i] = append([]byte{}, v...)
			}
		}
		return out, nil
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "22P02" || pe.Code == "22003") {
		return m, false, nil // an id no row of the table can have: another database's, say
	}
	if err != nil {
		return m, false, fmt.Errorf("read row %s of %s: %w", id, name, err)
	}
	if len(values) == 0 {
		return m, false, nil
	}
	m, err = t.rows.Message(values[0])
	row := m
	var de *decoder.Error
	if errors.As(err, &de) {
		row = de.Partial
	}
	if !created.IsZero() && !row.CreatedAt.IsZero() && !row.CreatedAt.Truncate(time.Second).Equal(created.Truncate(time.Second)) {
		return wire.Message{}, false, nil // another row, with the parked row's id
	}
	return m, err == nil || decoder.IsBadRow(err), err
}

// prepare builds the query of one table, or returns nil where rows cannot be read by id.
func (r *rows) prepare(ctx context.Context, name string) (*table, error) {
	mp, ok := r.maps[name]
	if !ok || mp.MessageID != wire.IDFromColumn {
		return nil, nil
	}
	ident := pgx.Identifier{mp.Table.Schema, mp.Table.Name}.Sanitize()
	rs, err := r.db.Query(ctx, `SELECT a.attname, a.atttypid, pg_catalog.format_type(a.atttypid, a.atttypmod)
		FROM pg_catalog.pg_attribute a WHERE a.attrelid = $1::pg_catalog.regclass AND a.attnum > 0
		AND NOT a.attisdropped AND a.attgenerated = '' ORDER BY a.attnum`, ident)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", name, err)
	}
	var (
		cols   []decoder.Column
		list   []string
		idType string
	)
	for rs.Next() {
		var c decoder.Column
		var typ string
		if err := rs.Scan(&c.Name, &c.Type, &typ); err != nil {
			rs.Close()
			return nil, fmt.Errorf("read the columns of %s: %w", name, err)
		}
		if c.Name == mp.ID {
			idType = typ
		}
		cols = append(cols, c)
		list = append(list, pgx.Identifier{c.Name}.Sanitize()+"::text")
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", name, err)
	}
	tr, err := r.dec.Rows(mp.Table.Schema, mp.Table.Name, cols)
	if errors.Is(err, decoder.ErrNoPosition) || idType == "" {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", name, err)
	}
	q := fmt.Sprintf("SELECT %s FROM %s WHERE %s = CAST($1::text AS %s)", strings.Join(list, ", "), ident,
		pgx.Identifier{mp.ID}.Sanitize(), idType)
	return &table{rows: tr, query: q}, nil
}
