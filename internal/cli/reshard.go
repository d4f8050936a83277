package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/slots"
)

// runReshard changes the number of shards without losing a row, in two steps the old relays
// outlive. First it creates the new set of publications and slots beside the old one, while the
// old relays keep streaming. The new slots' consistent point is the cut. Once every old slot has
// confirmed past it, the old relays may stop, and --retire drops the old set.
func runReshard(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon("reshard")
	fs := newFlagSet("reshard", "Change the number of shards: create the new set beside the old one, then retire the old one once it passed the cut", stderr)
	if err := c.parse(fs, args); err != nil {
		return err
	}
	v, shardsSetting := c.v, c.s.get("shards")
	dsn, table, n, doRetire := v.relay.DatabaseURL, v.relay.Table, v.shards, v.retire
	if err := checkPositionShards(c, n, shardsSetting); err != nil {
		return err
	}
	fail := c.fail
	conn, err := pgconnect.Connect(ctx, dsn)
	if err != nil {
		return fail(fmt.Errorf("connect to postgres: %w", err))
	}
	defer conn.Close(context.Background())
	cfg := v.reshard
	cfg.Conn, cfg.DatabaseURL, cfg.ReplicationURL, cfg.Table = conn, dsn, v.relay.ReplicationURL, table
	cfg.Base, cfg.Tables, cfg.Shards, cfg.Failover = c.set(), relayTables(c, table), n, v.relay.FailoverSlot
	r := resharder{out: stdout, cfg: cfg}
	if replURL := cfg.ReplicationURL; replURL != "" {
		// The slots are the standby's: read and dropped there, created there by EnsureSlot.
		if r.cfg.SlotConn, err = pgconnect.Connect(ctx, replURL); err != nil {
			return fail(fmt.Errorf("connect to the standby (--replication-url): %w", err))
		}
		defer r.cfg.SlotConn.Close(context.Background())
	}
	if doRetire {
		err = r.retire(ctx)
	} else {
		err = r.begin(ctx)
	}
	if err != nil {
		return fail(mismatch(shardsSetting, err))
	}
	return nil
}

type resharder struct {
	out io.Writer
	cfg slots.ReshardConfig
}

// begin creates the new set beside the old one (slots.Reshard). It reports how far the old
// slots are from the cut.
func (r resharder) begin(ctx context.Context) error {
	r.cfg.CreatedPublication = func(name string) { fmt.Fprintf(r.out, "created publication %s\n", name) }
	r.cfg.EnsuredSlot = func(slot string, created bool) { printSlot(r.out, slot, created) }
	res, err := slots.Reshard(ctx, r.cfg)
	switch m := res.Move; {
	case m == nil && err == nil:
		fmt.Fprintf(r.out, "%s already; nothing to reshard\n", res.Layout)
	case m == nil:
	case len(res.Behind) == 0:
		fmt.Fprintf(r.out, "every slot of %s passed the cut %s: start the relays of %s (if not yet), stop the old ones, "+
			"then run walbox reshard --shards %d --retire\n", m.From.Set, m.Cut, m.To.Set, r.cfg.Shards)
	default:
		fmt.Fprintf(r.out, "cut %s: keep the relays of %s running until their slots pass it (walbox status shows them); "+
			"not yet: %s\n", m.Cut, m.From.Set, strings.Join(res.Behind, ", "))
	}
	return err
}

// retire drops the old set once each of its slots passed the cut and none is streaming.
func (r resharder) retire(ctx context.Context) error {
	m, err := slots.ReadReshard(ctx, r.cfg)
	if err != nil {
		return err
	}
	err = slots.Retire(ctx, r.cfg, m, func(sl inspect.Slot) {
		fmt.Fprintf(r.out, "dropped replication slot %s (confirmed %s, cut %s)\n", sl.Name, sl.ConfirmedFlush, m.Cut)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(r.out, "retired %s; %s relays the outbox table\n", m.From.Set, m.To.Set)
	return nil
}
