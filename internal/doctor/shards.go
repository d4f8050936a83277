package doctor

import (
	"context"
	"fmt"

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
	slotDB := conn
	if d.standby != "" {
		standby, err := pgconnect.Connect(ctx, d.standby)
		if err != nil {
			return []Check{failCheck("slot", "check --replication-url", "cannot connect to the standby to read the shards' slots: %v", err)}
		}
		defer standby.Close(context.Background())
		slotDB = standby
	}
	gone := d.goneInReshard(ctx, conn, slotDB)
	var out []Check
	for _, name := range slots {
		sf := f
		var err error
		if sf.slot, err = inspect.ReadSlot(ctx, slotDB, name); err != nil {
			out = append(out, failCheck("slot", "", "%v", err))
			continue
		}
		sc := slotCheck(sf, name)
		if fix, ok := gone[name]; ok && !sf.slot.Exists {
			sc.Fix = fix
		}
		out = append(out, sc, d.recordCheckOf(ctx, conn, sf, name))
	}
	return out
}

// goneInReshard returns the way out for each missing, unrecorded slot of a reshard stopped midway.
// The usual way out, walbox migrate, would create an old slot anew. The
// slots are read through slotDB; nil is conn, or none with --replication-url.
func (d doctor) goneInReshard(ctx context.Context, conn *pgx.Conn, slotDB *pgx.Conn) map[string]string {
	l, err := shard.ReadLayout(ctx, conn, d.table, shard.Set{Slot: d.slot, Publication: d.publication})
	if err != nil || len(l.Counts()) != 2 || (slotDB == nil && d.standby != "") {
		return nil
	}
	var q inspect.Querier // a nil *pgx.Conn in it would not be nil
	if slotDB != nil {
		q = slotDB
	}
	sets, err := shard.ReadStates(ctx, conn, q, l)
	if err != nil {
		return nil
	}
	m, moving, err := shard.FindMove(sets)
	gone := map[string]string{}
	for i := range sets {
		set := &sets[i]
		for k, sl := range set.Slots {
			switch {
			case sl.Exists || set.Records[k] != nil:
			case moving && set == m.From:
				gone[sl.Name] = fmt.Sprintf("a walbox reshard --retire stopped midway dropped it: run walbox reshard --shards %d --retire again", m.To.Set.N)
			case err != nil:
				gone[sl.Name] = "if walbox reshard or its --retire stopped midway, run it again (do not run walbox migrate)"
			}
		}
	}
	return gone
}
