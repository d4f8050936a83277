package cli

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/shard"
)

// checkPositionShards refuses --shards above 1 when a table of the config file takes its ids
// from positions. Each shard would number its rows on its own (shard.CheckPositionIDs).
func checkPositionShards(c *common, n int, st *setting) error {
	if err := shard.CheckPositionIDs(n, c.mappings()); err != nil {
		return badSetting(st, "%v", err)
	}
	return nil
}

// checkPositionFilters refuses a publication that filters the rows of a table whose ids come from
// positions. The error names the config file that maps it so.
func checkPositionFilters(ctx context.Context, conn *pgx.Conn, c *common) error {
	err := shard.CheckPositionFilters(ctx, conn, c.set(), c.mappings())
	if errors.Is(err, shard.ErrPositionIDs) {
		return badSetting(c.s.get("config"), "%v", err)
	}
	return err
}

// connectAndCheckPositions is checkPositionFilters on a connection of its own. A database it
// cannot reach is left to the relay, which checks its publication at every session.
func connectAndCheckPositions(ctx context.Context, dsn string, c *common) error {
	if len(c.mappings()) == 0 {
		return nil
	}
	conn, err := pgconnect.Connect(ctx, dsn)
	if err != nil {
		return nil
	}
	defer conn.Close(context.Background())
	if err := checkPositionFilters(ctx, conn, c); errors.As(err, new(configError)) {
		return err
	}
	return nil
}
