package doctor

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/shard"
)

// positionIDsCheck checks the tables that take their message ids from positions. No publication of
// walbox's (the single slot's or a shard's) may filter their rows. Both `walbox run` and `walbox
// migrate` refuse such a filter. It returns no check when no table has position ids.
func (d doctor) positionIDsCheck(ctx context.Context, conn *pgx.Conn) []Check {
	var tables []string
	for _, m := range d.mappings {
		if m.WithDefaults().MessageID == outbox.IDFromPosition {
			tables = append(tables, m.WithDefaults().Table.String())
		}
	}
	if len(tables) == 0 {
		return nil
	}
	err := shard.CheckPositionFilters(ctx, conn, shard.Set{Slot: d.slot, Publication: d.publication}, d.mappings)
	switch {
	case errors.Is(err, shard.ErrPositionIDs):
		return []Check{failCheck("position_ids", "map an id column (message-id: column) in the config file, "+
			"or run with one slot and drop the row filter (`walbox reshard --shards 1` for shards)", "%v", err)}
	case err != nil:
		return []Check{failCheck("position_ids", "", "%v", err)}
	}
	return []Check{passCheck("position_ids", "no publication of %s filters the rows of %s, whose ids come from positions",
		d.publication, strings.Join(tables, ", "))}
}
