package slots

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/wire"
)

// ReshardConfig configures a change of the number of shards (`walbox reshard`).
type ReshardConfig struct {
	// Conn is an ordinary connection to the primary. DatabaseURL is its URL, for the replication
	// connections that create the new slots.
	Conn        *pgx.Conn
	DatabaseURL string
	// ReplicationURL is as in replication.Config: the slots are the standby's, created there; the
	// records stay on DatabaseURL. SlotConn is an ordinary connection to it, which reads and
	// drops the slots. Both empty: the slots are on DatabaseURL.
	ReplicationURL string
	SlotConn       *pgx.Conn
	// Table is the outbox table, and Base holds the base names of slot and publication.
	Table wire.Table
	Base  shard.Set
	// Tables are the outbox tables the relays stream, whose coverage each new slot records
	// (see EnsureSlot).
	Tables []wire.Table
	// Shards is the number of shards to move to.
	Shards   int
	Failover FailoverSlot
	// Wait is how long Reshard waits for the old slots to pass the cut; 0: it does not wait.
	Wait time.Duration
	// CreatedPublication, if set, is told each publication Reshard creates. EnsuredSlot, if set, is
	// told each slot of the new set, and whether Reshard created it.
	CreatedPublication func(name string)
	EnsuredSlot        func(slot string, created bool)
}

// Resharding is where Reshard left the change.
type Resharding struct {
	// Layout, with Move nil and no error, is what publishes the table. The set of
	// ReshardConfig.Shards shards exists already, and there is nothing to reshard.
	Layout shard.Layout
	// Move is the reshard in progress, once the new set exists. Behind names the old slots that
	// have not passed its cut yet. With none, the old relays may stop, and the old set be retired.
	Move   *shard.Move
	Behind []string
}

// Reshard changes the number of shards without losing a row, in two steps that the old relays
// outlive. First it creates the new set of publications and slots beside the old one. It creates
// the publications first, and the old relays keep streaming. Then it reports how far the old slots
// are from the new slots' consistent point (the cut). It waits up to Wait for each to pass it. Once
// every old slot has, the old relays may stop, and Retire drops the old set.
func Reshard(ctx context.Context, c ReshardConfig) (Resharding, error) {
	l, from, err := layout(ctx, c)
	if err != nil {
		return Resharding{}, err
	}
	if from == 0 {
		if slices.Contains(l.Counts(), c.Shards) {
			return Resharding{Layout: l}, nil
		}
		return Resharding{}, fmt.Errorf("%w: %s; create the first set with walbox migrate", shard.ErrMismatch, l)
	}
	to := l.Set(c.Shards)
	if err := to.Validate(); err != nil {
		return Resharding{}, err
	}
	if err := checkOneTable(ctx, c, l); err != nil {
		return Resharding{}, err
	}
	if _, err := migrations.ApplyRegistry(ctx, c.Conn, l.Table.Schema); err != nil {
		return Resharding{}, err
	}
	created, err := shard.CreatePublications(ctx, c.Conn, l.Table, to)
	if err != nil {
		return Resharding{}, err
	}
	killpoint.Hit("reshard.published")
	for _, name := range created {
		if c.CreatedPublication != nil {
			c.CreatedPublication(name)
		}
	}
	for k := range to.N {
		slot := to.SlotName(k)
		made, err := EnsureSlot(ctx, c.DatabaseURL, slot, to.PublicationName(k), c.Tables, registry.New(c.Conn, l.Table.Schema),
			WithFailoverSlot(c.Failover), WithReplicationURL(c.ReplicationURL), withFoundRecorded())
		if err != nil {
			return Resharding{}, err
		}
		killpoint.Hit("reshard.slot")
		if c.EnsuredSlot != nil {
			c.EnsuredSlot(slot, made)
		}
	}
	return waitForCut(ctx, c)
}

// waitForCut reads the reshard in progress until every old slot passed the cut, or Wait is over.
func waitForCut(ctx context.Context, c ReshardConfig) (Resharding, error) {
	deadline := time.Now().Add(c.Wait)
	for {
		m, err := ReadReshard(ctx, c)
		if err != nil {
			return Resharding{}, err
		}
		behind := m.Behind()
		if len(behind) == 0 {
			return Resharding{Move: &m}, nil
		}
		if c.Wait == 0 || time.Now().After(deadline) {
			r := Resharding{Move: &m, Behind: behind}
			if c.Wait > 0 {
				return r, fmt.Errorf("the old slots did not pass the cut %s within %v: %s", m.Cut, c.Wait, strings.Join(behind, ", "))
			}
			return r, nil
		}
		select {
		case <-ctx.Done():
			return Resharding{}, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ReadReshard reads the reshard to ReshardConfig.Shards shards in progress.
func ReadReshard(ctx context.Context, c ReshardConfig) (shard.Move, error) {
	l, from, err := layout(ctx, c)
	if err != nil {
		return shard.Move{}, err
	}
	if from == 0 {
		return shard.Move{}, fmt.Errorf("%w: %s; no reshard to %d shards is in progress", shard.ErrMismatch, l, c.Shards)
	}
	sets, err := shard.ReadStates(ctx, c.Conn, c.slotDB(), l)
	if err != nil {
		return shard.Move{}, err
	}
	m, ok, err := shard.FindMoveTo(sets, c.Shards)
	if err != nil {
		return shard.Move{}, err
	}
	if !ok || m.To.Set.N != c.Shards {
		return shard.Move{}, fmt.Errorf("%w: %s, and the set of %d shards is not the newer one", shard.ErrMismatch, l, c.Shards)
	}
	return m, nil
}

// checkOneTable refuses a reshard of a configuration that relays other tables beside the outbox
// table. A set of shards splits that one table, and its publications publish nothing else. Retiring
// the old set would drop the publication that carries the others (see othersOf).
func checkOneTable(ctx context.Context, c ReshardConfig, l shard.Layout) error {
	if err := shard.OneTable(c.Table, c.Tables); err != nil {
		return err
	}
	for _, cl := range l.Claims {
		others, err := othersOf(ctx, c.Conn, cl.Publication, c.Table)
		if err != nil {
			return err
		}
		if len(others) > 0 {
			return fmt.Errorf("publication %s also publishes %s: a set of shards splits %s alone, and retiring %s would leave "+
				"those to no relay. Relay them with a publication and slot of their own first, then remove them from %s",
				cl.Publication, strings.Join(others, ", "), c.Table, cl.Publication, cl.Publication)
		}
	}
	return nil
}

// othersOf lists the tables publication publishes besides table.
func othersOf(ctx context.Context, conn *pgx.Conn, publication string, table wire.Table) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT pg_catalog.quote_ident(schemaname) || '.' || pg_catalog.quote_ident(tablename)
		FROM pg_catalog.pg_publication_tables WHERE pubname = $1 AND (schemaname, tablename) <> ($2, $3) ORDER BY 1`,
		publication, table.Schema, table.Name)
	if err != nil {
		return nil, fmt.Errorf("read the tables of publication %s: %w", publication, err)
	}
	others, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read the tables of publication %s: %w", publication, err)
	}
	return others, nil
}

// slotDB is the connection that reads and drops the slots.
func (c ReshardConfig) slotDB() *pgx.Conn {
	if c.SlotConn != nil {
		return c.SlotConn
	}
	return c.Conn
}

// layout reads and checks what publishes the table, and returns the count being moved from.
func layout(ctx context.Context, c ReshardConfig) (shard.Layout, int, error) {
	l, err := shard.ReadLayout(ctx, c.Conn, c.Table, c.Base)
	if err != nil {
		return l, 0, err
	}
	if err := l.Check(); err != nil {
		return l, 0, err
	}
	var others []int
	for _, n := range l.Counts() {
		if n != c.Shards {
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
