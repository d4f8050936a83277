package doctor

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/shard"
)

// shardSlots returns the slots of every set of shards (more than one) that publishes the outbox
// table. It says whether the single slot is checked too. It is when its publication publishes the
// table, or when no set of shards does.
func (d doctor) shardSlots(ctx context.Context, conn *pgx.Conn) (slots []string, single bool, err error) {
	l, err := shard.ReadLayout(ctx, conn, d.table, shard.Set{Slot: d.slot, Publication: d.publication})
	if err != nil {
		return nil, true, err
	}
	single = true
	for _, n := range l.Counts() {
		if n == 1 {
			continue
		}
		single = false
		set := l.Set(n)
		for k := range n {
			slots = append(slots, set.SlotName(k))
		}
	}
	for _, n := range l.Counts() {
		single = single || n == 1
	}
	return slots, single, nil
}

// shardChecks checks each shard's slot and record as slotCheck and recordCheck check the single
// slot's. The command walbox run refuses a shard's slot for the same reasons. The slots are read
// where they are, on the standby of --replication-url if given.
func (d doctor) shardChecks(ctx context.Context, conn *pgx.Conn, f pgFacts, slots []string) []Check {
	if len(slots) == 0 {
		return nil
	}
	var slotDB inspect.Querier = conn
	if d.standby != "" {
		standby, err := pgconnect.Connect(ctx, d.standby)
		if err != nil {
			return []Check{failCheck("slot", "check --replication-url", "cannot connect to the standby to read the shards' slots: %v", err)}
		}
		defer standby.Close(context.Background())
		slotDB = standby
	}
	var out []Check
	for _, name := range slots {
		sf := f
		var err error
		if sf.slot, err = inspect.ReadSlot(ctx, slotDB, name); err != nil {
			out = append(out, failCheck("slot", "", "%v", err))
			continue
		}
		out = append(out, slotCheck(sf, name), d.recordCheckOf(ctx, conn, sf, name))
	}
	return out
}
