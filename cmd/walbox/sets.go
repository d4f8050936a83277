package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/shard"
)

// setState is one set of shards (the single slot is a set of one) as the server has it: each
// shard's slot and record.
type setState struct {
	set     shard.Set
	slots   []inspect.Slot
	records []*registry.Record // nil where a slot has no record
	created pglogrepl.LSN      // the latest consistent point of its slots; 0 if one is unknown
}

// readSets reads every set of shards that publishes the outbox table, in order of shard count.
func readSets(ctx context.Context, conn *pgx.Conn, layout shard.Layout) ([]setState, error) {
	reg := registry.New(conn, layout.Table.Schema)
	hasRegistry, err := reg.Exists(ctx)
	if err != nil {
		return nil, err
	}
	var sets []setState
	for _, n := range layout.Counts() {
		st := setState{set: layout.Set(n)}
		for k := range n {
			sl, err := inspect.ReadSlot(ctx, conn, st.set.SlotName(k))
			if err != nil {
				return nil, err
			}
			st.slots = append(st.slots, sl)
			var rec *registry.Record
			if hasRegistry {
				r, ok, err := reg.Get(ctx, st.set.SlotName(k))
				if err != nil {
					return nil, err
				}
				if ok {
					rec = &r
				}
			}
			st.records = append(st.records, rec)
		}
		st.created = consistentPoint(st)
		sets = append(sets, st)
	}
	return sets, nil
}

// consistentPoint is the latest consistent point of the set's slots, from their records: every
// transaction that commits after it is decoded by each of the set's slots. 0 when a slot has no
// recorded consistent point.
func consistentPoint(st setState) pglogrepl.LSN {
	var latest pglogrepl.LSN
	for _, r := range st.records {
		if r == nil || r.CreatedLSN == 0 {
			return 0
		}
		latest = max(latest, r.CreatedLSN)
	}
	return latest
}

// move is a reshard in progress: the set it moves to was created after the set it moves from,
// and the old set must deliver every row committed before cut, the new set's consistent point.
type move struct {
	from, to *setState
	cut      pglogrepl.LSN
}

// findMove returns the reshard in progress between exactly two sets, the newer one being the one
// whose slots were created later. ok is false with fewer or more than two sets.
func findMove(sets []setState) (m move, ok bool, err error) {
	if len(sets) != 2 {
		return move{}, false, nil
	}
	a, b := &sets[0], &sets[1]
	if a.created == 0 || b.created == 0 {
		return move{}, false, fmt.Errorf("the slots of %s or of %s have no recorded consistent point; cannot tell which set replaces which", a.set, b.set)
	}
	if a.created > b.created {
		a, b = b, a
	}
	return move{from: a, to: b, cut: b.created}, true, nil
}

// passed reports whether slot k of the old set has confirmed everything before the cut.
func (m move) passed(k int) bool {
	sl := m.from.slots[k]
	return sl.Exists && sl.ConfirmedFlush >= m.cut
}

// behind lists the old set's slots that have not passed the cut yet.
func (m move) behind() []string {
	var out []string
	for k, sl := range m.from.slots {
		if !m.passed(k) {
			out = append(out, fmt.Sprintf("%s at %s", sl.Name, sl.ConfirmedFlush))
		}
	}
	return slices.Clip(out)
}
