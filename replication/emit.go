package replication

import (
	"context"
	"fmt"

	"github.com/walbox/walbox/inspect"
)

// checkEmit refuses an emit function that writes another prefix than the relay relays.
// The relay would skip every message it writes, in silence.
// Walbox doctor fails it too (inspect.Emit.Err).
func checkEmit(ctx context.Context, q inspect.Querier, cfg *Config) error {
	if cfg.messagePrefix() == "" {
		return nil
	}
	e, err := inspect.ReadEmit(ctx, q, cfg.Table, cfg.messagePrefix())
	if err != nil {
		return err
	}
	if err := e.Err(); err != nil {
		fix := "set --message-prefix to the prefix " + e.Function + " was migrated with"
		if e.Emits != "" {
			fix = "run walbox with --message-prefix " + shellWord(e.Emits)
		}
		return fatal(fmt.Errorf("--message-prefix %s: %w. To relay its messages, %s; to relay none, --message-prefix none",
			shellWord(cfg.MessagePrefix), err, fix))
	}
	return nil
}
