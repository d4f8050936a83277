package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/shard"
)

// readLayout reads the shards that publish the outbox table.
func readLayout(ctx context.Context, conn *pgx.Conn, c *common) (shard.Layout, error) {
	return shard.ReadLayout(ctx, conn, c.v.relay.Table, c.set())
}

// mismatch turns a shard mismatch into a bad setting (exit 2) naming the setting.
func mismatch(st *setting, err error) error {
	if errors.Is(err, shard.ErrMismatch) {
		return badSetting(st, "%v", err)
	}
	return err
}

// applyShard points cfg at its shard's slot and publication, when --shard is set. It checks first
// that walbox migrate created the shard: a mismatched --shards stops walbox naming both. Without
// --shard it warns when shards publish the table too. Their relays and this one would both
// deliver those rows, as expected only while `walbox reshard` moves between them.
func applyShard(ctx context.Context, cfg *replication.Config, c *common) error {
	n, k, shards, shardK := c.v.shards, c.v.shard, c.s.get("shards"), c.s.get("shard")
	if k < 0 {
		// Only a warning: the relay itself reports a database it cannot reach.
		layout, err := connectAndReadLayout(ctx, cfg.DatabaseURL, c)
		ns := layout.Counts()
		switch {
		case err != nil || len(ns) == 0 || (len(ns) == 1 && ns[0] == 1):
		case !slices.Contains(ns, 1):
			return badSetting(shardK, "required: %s; run one relay per shard", layout)
		default:
			cfg.Logger.Warn("shards publish the outbox table too: rows go out through the single slot and through them "+
				"(expected only while `walbox reshard` moves between them)", "layout", layout.String())
		}
		return nil
	}
	layout, err := readLayoutWaiting(ctx, cfg, c)
	if err != nil {
		return err
	}
	set, err := layout.Resolve(k, n)
	if err != nil {
		if n == 0 {
			return mismatch(shardK, err)
		}
		return mismatch(shards, err)
	}
	cfg.Shard, cfg.Shards = k, set.N
	cfg.Slot, cfg.Publication = set.SlotName(k), set.PublicationName(k)
	return nil
}

// readLayoutWaiting reads the layout, retrying while the database cannot be reached if the
// relay waits for its servers.
func readLayoutWaiting(ctx context.Context, cfg *replication.Config, c *common) (shard.Layout, error) {
	for {
		l, err := connectAndReadLayout(ctx, cfg.DatabaseURL, c)
		if err == nil || !cfg.WaitForServers || ctx.Err() != nil {
			if err != nil {
				return l, c.fail(err)
			}
			return l, nil
		}
		cfg.Logger.Warn("cannot read the publications yet; retrying", "error", redact.Text(err.Error(), c.secrets()...))
		select {
		case <-ctx.Done():
			return l, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

func connectAndReadLayout(ctx context.Context, dsn string, c *common) (shard.Layout, error) {
	conn, err := pgconnect.Connect(ctx, dsn)
	if err != nil {
		return shard.Layout{}, fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.Background())
	return readLayout(ctx, conn, c)
}

func shardLabel(cfg replication.Config) string {
	if cfg.Shards == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", cfg.Shard, cfg.Shards)
}

// reshardCut returns the cut of a reshard in progress into the set of the relay cfg. That set is
// its shards, or the single slot. The cut is read from walbox's record of the slots; it is 0 when
// no reshard moves into the set. The old set delivers every row committed before the cut. A
// stream relay of the new set skips them (streampub.Config.SkipBefore), or the stream would hold
// them twice.
func reshardCut(ctx context.Context, cfg replication.Config, c *common) (uint64, error) {
	conn, err := pgconnect.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return 0, fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.Background())
	layout, err := readLayout(ctx, conn, c)
	if err != nil || len(layout.Counts()) < 2 {
		return 0, err
	}
	sets, err := shard.ReadStates(ctx, conn, nil, layout)
	if err != nil {
		return 0, err
	}
	m, moving, err := shard.FindMove(sets)
	if err != nil || !moving || m.To.Set.N != max(cfg.Shards, 1) {
		return 0, err
	}
	return uint64(m.Cut), nil
}
