package republish

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/decoder"
)

// Querier runs a query: a *pgx.Conn or a pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Columns returns the columns of table (quoted) with their types, in the table's order. It returns
// them as the walsender sends them: no generated or dropped column. With published, only those
// named there; nil is every column.
func Columns(ctx context.Context, q Querier, table string, published []string) ([]decoder.Column, error) {
	rows, err := q.Query(ctx, `SELECT attname, atttypid FROM pg_catalog.pg_attribute
		WHERE attrelid = $1::pg_catalog.regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = ''
			AND ($2::pg_catalog.text[] IS NULL OR attname = ANY($2))
		ORDER BY attnum`, table, published)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	cols, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (decoder.Column, error) {
		var c decoder.Column
		err := row.Scan(&c.Name, &c.Type)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	return cols, nil
}
