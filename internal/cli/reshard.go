package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/slots"
)

// runReshard changes the number of shards without losing a row, in two steps that the old relays
// outlive: first it creates the new set of publications and slots beside the old one (the old
// relays keep streaming); once every old slot has confirmed past the new slots' consistent point
// (the cut), the old relays may stop, and --retire drops the old set.
func runReshard(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon("reshard")
	shardsSetting, wait, retire := c.s.get("shards"), c.s.get("wait"), c.s.get("retire")
	fs := newFlagSet("reshard", "Change the number of shards: create the new set beside the old one, then retire the old one once it passed the cut", stderr)
	if err := c.parse(fs, args); err != nil {
		return err
	}
	dsn, err := c.dsn()
	if err != nil {
		return err
	}
	if _, err := c.failover(); err != nil {
		return err
	}
	n, err := shardCount(shardsSetting)
	if err != nil {
		return err
	}
	if n == 0 {
		return badSetting(shardsSetting, "required: the number of shards to move to")
	}
	if err := checkPositionShards(c, n, shardsSetting); err != nil {
		return err
	}
	var waitFor time.Duration
	if wait.value != "" {
		if waitFor, err = wait.duration(); err != nil {
			return err
		}
	}
	doRetire, err := retire.bool()
	if err != nil {
		return err
	}
	replURL, err := c.replicationDSN()
	if err != nil {
		return err
	}
	fail := c.fail
	conn, err := pgconnect.Connect(ctx, dsn)
	if err != nil {
		return fail(fmt.Errorf("connect to postgres: %w", err))
	}
	defer conn.Close(context.Background())
	table, err := c.outboxTable()
	if err != nil {
		return fail(err)
	}
	r := resharder{out: stdout, cfg: slots.ReshardConfig{Conn: conn, DatabaseURL: dsn, ReplicationURL: replURL, Table: table,
		Base: shard.Set{Slot: c.slot.value, Publication: c.publication.value}, Tables: relayTables(c, table),
		Shards: n, Failover: failover(c), Wait: waitFor}}
	if replURL != "" {
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

// begin creates the new set beside the old one (slots.Reshard) and reports how far the old slots
// are from the cut.
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
