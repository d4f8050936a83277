package shard

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/registry"
)

// SetState is one set of shards (the single slot is a set of one) as the server has it. It holds
// each shard's slot and record.
type SetState struct {
	Set     Set
	Slots   []inspect.Slot
	Records []*registry.Record // nil where a slot has no record
	// Created is the latest consistent point of its slots; 0 if one is unknown.
	Created pglogrepl.LSN
}

// ReadStates reads every set of shards that publishes the outbox table, in order of shard count. It
// reads the records through conn, and the slots through slotDB. That is the standby of
// --replication-url, where the slots are; nil means conn.
func ReadStates(ctx context.Context, conn *pgx.Conn, slotDB inspect.Querier, layout Layout) ([]SetState, error) {
	if slotDB == nil {
		slotDB = conn
	}
	reg := registry.New(conn, layout.Table.Schema)
	hasRegistry, err := reg.Exists(ctx)
	if err != nil {
		return nil, err
	}
	var sets []SetState
	for _, n := range layout.Counts() {
		st := SetState{Set: layout.Set(n)}
		for k := range n {
			sl, err := inspect.ReadSlot(ctx, slotDB, st.Set.SlotName(k))
			if err != nil {
				return nil, err
			}
			st.Slots = append(st.Slots, sl)
			var rec *registry.Record
			if hasRegistry {
				r, ok, err := reg.Get(ctx, st.Set.SlotName(k))
				if err != nil {
					return nil, err
				}
				if ok {
					rec = &r
				}
			}
			st.Records = append(st.Records, rec)
		}
		st.Created = consistentPoint(st)
		sets = append(sets, st)
	}
	return sets, nil
}

// consistentPoint is the latest consistent point of the set's slots, from their records. Each of
// the set's slots decodes every transaction that commits after it. It is 0 when a slot has no
// recorded consistent point.
func consistentPoint(st SetState) pglogrepl.LSN {
	var latest pglogrepl.LSN
	for _, r := range st.Records {
		if r == nil || r.CreatedLSN == 0 {
			return 0
		}
		latest = max(latest, r.CreatedLSN)
	}
	return latest
}

// Move is a reshard in progress. The set it moves to was created after the set it moves from. The
// old set must deliver every row committed before Cut, the new set's consistent point.
type Move struct {
	From, To *SetState
	Cut      pglogrepl.LSN
}

// FindMove returns the reshard in progress between exactly two sets. The newer set is the one whose
// slots were created later. The result ok is false with fewer or more than two sets.
//
// A set may lack a consistent point and still be the older one. Each of its shards is then gone (no
// slot, no record) or recorded as created before the other set. A retire stopped midway leaves such
// a set: it dropped and forgot some slots. The newer set needs the consistent point of every slot:
// that is the cut. A set gone whole, its publications alone left, may be either: FindMoveTo tells.
func FindMove(sets []SetState) (m Move, ok bool, err error) { return findMove(sets, 0) }

// FindMoveTo is FindMove for a reshard into n shards. A set gone whole is then the older one when
// the other set has n shards. A retire that stopped after it forgot every slot leaves such a set,
// with its publications.
func FindMoveTo(sets []SetState, n int) (m Move, ok bool, err error) { return findMove(sets, n) }

func findMove(sets []SetState, to int) (m Move, ok bool, err error) {
	if len(sets) != 2 {
		return Move{}, false, nil
	}
	a, b := &sets[0], &sets[1]
	if a.Created > b.Created {
		a, b = b, a
	}
	if b.Created == 0 || (a.Created == 0 && !a.retiredBefore(b.Created, b.Set.N == to)) {
		return Move{}, false, fmt.Errorf("the slots of %s or of %s have no recorded consistent point; cannot tell which set "+
			"replaces which. If walbox reshard or its --retire was stopped midway, run it again", a.Set, b.Set)
	}
	return Move{From: a, To: b, Cut: b.Created}, true, nil
}

// retiredBefore reports whether each shard of the set is gone (no slot, no record) or recorded
// as created before cut. A set gone whole counts only if whole is true.
func (st *SetState) retiredBefore(cut pglogrepl.LSN, whole bool) bool {
	recorded := false
	for k, rec := range st.Records {
		if rec == nil && k < len(st.Slots) && st.Slots[k].Exists {
			return false
		}
		if rec != nil && (rec.CreatedLSN == 0 || rec.CreatedLSN >= cut) {
			return false
		}
		recorded = recorded || rec != nil
	}
	return recorded || whole
}

// Passed reports whether slot k of the old set has confirmed everything before the cut. It judges
// by walbox's record of the slot. The record is at or past the cut and holds no stop. And the slot,
// if it still exists, is not ahead of it. A slot moved past the cut behind walbox's back proves
// nothing. Anyone with REPLICATION may advance one. But walbox records a position before it reports
// it, so the record passes the cut first. A slot gone with its record was retired. Retire drops a
// slot and forgets its record only once it passed.
func (m Move) Passed(k int) bool {
	sl, rec := m.From.Slots[k], m.From.Records[k]
	if rec == nil && !sl.Exists {
		return true
	}
	return rec != nil && rec.ConfirmedLSN >= m.Cut && !rec.Stop.Stopped() && (!sl.Exists || sl.ConfirmedFlush <= rec.ConfirmedLSN)
}

// Behind lists the old set's slots that have not passed the cut yet, at their recorded position.
func (m Move) Behind() []string {
	var out []string
	for k, sl := range m.From.Slots {
		if m.Passed(k) {
			continue
		}
		if rec := m.From.Records[k]; rec != nil {
			out = append(out, fmt.Sprintf("%s at %s", sl.Name, rec.ConfirmedLSN))
		} else {
			out = append(out, fmt.Sprintf("%s (no record)", sl.Name))
		}
	}
	return slices.Clip(out)
}
