package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/registry"
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
	fail := c.fail
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fail(fmt.Errorf("connect to postgres: %w", err))
	}
	defer conn.Close(context.Background())
	r := resharder{c: c, conn: conn, dsn: dsn, out: stdout, n: n}
	if doRetire {
		err = r.retire(ctx)
	} else {
		err = r.begin(ctx, waitFor)
	}
	if err != nil {
		return fail(mismatch(shardsSetting, err))
	}
	return nil
}

type resharder struct {
	c    *common
	conn *pgx.Conn
	dsn  string
	out  io.Writer
	n    int
}

// layout reads and checks what publishes the table, and returns the count being moved from.
func (r resharder) layout(ctx context.Context) (shard.Layout, int, error) {
	l, err := readLayout(ctx, r.conn, r.c)
	if err != nil {
		return l, 0, err
	}
	if err := l.Check(); err != nil {
		return l, 0, err
	}
	var others []int
	for _, n := range l.Counts() {
		if n != r.n {
			others = append(others, n)
		}
	}
	switch len(others) {
	case 0:
		return l, 0, nil
	case 1:
		return l, others[0], nil
	}
	return l, 0, fmt.Errorf("%w: %s; finish the reshard in progress first (walbox reshard --shards N --retire)", shard.ErrMismatch, l)
}

// begin creates the new set (publications, then slots) beside the old one and reports how far
// the old slots are from the cut, waiting for them to pass it if asked.
func (r resharder) begin(ctx context.Context, wait time.Duration) error {
	l, from, err := r.layout(ctx)
	if err != nil {
		return err
	}
	if from == 0 {
		if slices.Contains(l.Counts(), r.n) {
			fmt.Fprintf(r.out, "%s already; nothing to reshard\n", l)
			return nil
		}
		return fmt.Errorf("%w: %s; create the first set with walbox migrate", shard.ErrMismatch, l)
	}
	to := l.Set(r.n)
	if err := to.Validate(); err != nil {
		return err
	}
	if _, err := migrations.ApplyRegistry(ctx, r.conn, l.Table.Schema); err != nil {
		return err
	}
	created, err := shard.CreatePublications(ctx, r.conn, l.Table, to)
	if err != nil {
		return err
	}
	for _, name := range created {
		fmt.Fprintf(r.out, "created publication %s\n", name)
	}
	for k := range to.N {
		if err := ensureSlot(ctx, r.out, r.dsn, to.SlotName(k), to.PublicationName(k), relayTables(r.c, l.Table), registry.New(r.conn, l.Table.Schema), failover(r.c), ""); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(wait)
	for {
		m, err := r.move(ctx)
		if err != nil {
			return err
		}
		behind := m.Behind()
		if len(behind) == 0 {
			fmt.Fprintf(r.out, "every slot of %s passed the cut %s: start the relays of %s (if not yet), stop the old ones, "+
				"then run walbox reshard --shards %d --retire\n", m.From.Set, m.Cut, m.To.Set, r.n)
			return nil
		}
		if wait == 0 || time.Now().After(deadline) {
			fmt.Fprintf(r.out, "cut %s: keep the relays of %s running until their slots pass it (walbox status shows them); "+
				"not yet: %s\n", m.Cut, m.From.Set, strings.Join(behind, ", "))
			if wait > 0 {
				return fmt.Errorf("the old slots did not pass the cut %s within %v: %s", m.Cut, wait, strings.Join(behind, ", "))
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// move reads the reshard in progress.
func (r resharder) move(ctx context.Context) (shard.Move, error) {
	l, from, err := r.layout(ctx)
	if err != nil {
		return shard.Move{}, err
	}
	if from == 0 {
		return shard.Move{}, fmt.Errorf("%w: %s; no reshard to %d shards is in progress", shard.ErrMismatch, l, r.n)
	}
	sets, err := shard.ReadStates(ctx, r.conn, l)
	if err != nil {
		return shard.Move{}, err
	}
	m, ok, err := shard.FindMove(sets)
	if err != nil {
		return shard.Move{}, err
	}
	if !ok || m.To.Set.N != r.n {
		return shard.Move{}, fmt.Errorf("%w: %s, and the set of %d shards is not the newer one", shard.ErrMismatch, l, r.n)
	}
	return m, nil
}

// retire drops the old set once each of its slots passed the cut and none is streaming.
func (r resharder) retire(ctx context.Context) error {
	m, err := r.move(ctx)
	if err != nil {
		return err
	}
	err = slots.Retire(ctx, r.conn, registry.New(r.conn, r.schema()), m, func(sl inspect.Slot) {
		fmt.Fprintf(r.out, "dropped replication slot %s (confirmed %s, cut %s)\n", sl.Name, sl.ConfirmedFlush, m.Cut)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(r.out, "retired %s; %s relays the outbox table\n", m.From.Set, m.To.Set)
	return nil
}

func (r resharder) schema() string {
	t, _ := r.c.outboxTable()
	return t.Schema
}
