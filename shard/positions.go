package shard

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/wire"
)

// Position ids (wire.IDFromPosition) number a row by its place among the inserts the walsender
// sends for its transaction. A row filter drops rows before they are numbered. Two shards of one
// transaction then both number a row 0, and their messages carry one message id. A consumer that
// deduplicates by message id then drops one of them. So walbox refuses position ids on a table that
// any of its publications filters.

// positionTables returns the tables of maps whose ids come from positions.
func positionTables(maps []wire.Mapping) []wire.Table {
	var out []wire.Table
	for _, m := range maps {
		if m = m.WithDefaults(); m.MessageID == wire.IDFromPosition {
			out = append(out, m.Table)
		}
	}
	return out
}

// CheckPositionIDs refuses n shards (n > 1) when a table of maps takes its ids from positions.
// It needs no server: a set of shards filters every row.
func CheckPositionIDs(n int, maps []wire.Mapping) error {
	tables := positionTables(maps)
	if n <= 1 || len(tables) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d shards, but table %s takes its message ids from positions (message-id: position); "+
		"each shard numbers only its own rows, so two shards give one id to two messages. "+
		"Map an id column (message-id: column), or use one slot", ErrPositionIDs, n, tables[0])
}

// CheckPositionFilters refuses a publication of base's set (the single slot's or a shard's) with a
// row filter. It does so when the publication publishes a table of maps that takes its ids from
// positions.
func CheckPositionFilters(ctx context.Context, q Querier, base Set, maps []wire.Mapping) error {
	for _, t := range positionTables(maps) {
		l, err := ReadLayout(ctx, q, t, base)
		if err != nil {
			return err
		}
		for _, c := range l.Claims {
			if c.Filter != "" {
				return positionFilterError(t, c.Publication, c.Filter)
			}
		}
	}
	return nil
}

// positionFilterError is the refusal of position ids on table, which publication publishes with
// the row filter filter.
func positionFilterError(table wire.Table, publication, filter string) error {
	return fmt.Errorf("%w: table %s takes its message ids from positions (message-id: position), but publication %s "+
		"publishes it with the row filter WHERE %s; a row's id counts only the rows the filter passes, so two filters "+
		"give one id to two messages. Map an id column (message-id: column), or drop the row filter",
		ErrPositionIDs, table, publication, filter)
}

// CheckPositionPublication refuses publication when it publishes a table of maps whose ids come
// from positions with a row filter. Every session of the relay checks its own publication.
func CheckPositionPublication(ctx context.Context, q Querier, publication string, maps []wire.Mapping) error {
	for _, t := range positionTables(maps) {
		rows, err := q.Query(ctx, `SELECT coalesce(rowfilter, '') FROM pg_catalog.pg_publication_tables
			WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`, publication, t.Schema, t.Name)
		if err != nil {
			return fmt.Errorf("read the row filter of publication %s: %w", publication, err)
		}
		filters, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("read the row filter of publication %s: %w", publication, err)
		}
		for _, f := range filters {
			if f != "" {
				return positionFilterError(t, publication, f)
			}
		}
	}
	return nil
}
