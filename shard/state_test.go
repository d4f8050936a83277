package shard_test

import (
	"slices"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/shard"
)

// The newer set is the one whose slots were created later, whatever the order of the sets, and
// the old slots pass its cut once they confirmed it.
func TestFindMove(t *testing.T) {
	base := shard.Set{Slot: "walbox", Publication: "walbox"}
	one := shard.SetState{Set: base, Created: 100,
		Slots:   []inspect.Slot{{Name: "walbox", Exists: true, ConfirmedFlush: 250}},
		Records: []*registry.Record{{Slot: "walbox", ConfirmedLSN: 250}}}
	two := shard.SetState{Set: shard.Set{Slot: "walbox", Publication: "walbox", N: 2}, Created: 200}
	for _, sets := range [][]shard.SetState{{one, two}, {two, one}} {
		m, ok, err := shard.FindMove(sets)
		if err != nil || !ok || m.From.Created != 100 || m.To.Created != 200 || m.Cut != 200 {
			t.Fatalf("FindMove = %+v, %t, %v: want from the set created at 100 to the one at 200, cut 200", m, ok, err)
		}
		if !m.Passed(0) || len(m.Behind()) != 0 {
			t.Errorf("a slot confirmed at 250: passed %t, behind %v; want passed", m.Passed(0), m.Behind())
		}
	}
	one.Slots[0].ConfirmedFlush = pglogrepl.LSN(150)
	one.Records[0].ConfirmedLSN = pglogrepl.LSN(150)
	m, _, _ := shard.FindMove([]shard.SetState{two, one})
	if m.Passed(0) || !slices.Equal(m.Behind(), []string{"walbox at 0/96"}) {
		t.Errorf("a slot confirmed at 150: passed %t, behind %v; want behind", m.Passed(0), m.Behind())
	}
	// A slot advanced past the cut behind walbox's back has not passed it: the record says what
	// walbox confirmed.
	one.Slots[0].ConfirmedFlush = pglogrepl.LSN(300)
	if m.Passed(0) {
		t.Error("a slot at 300 whose record is at 150: passed; want behind")
	}
	// A slot whose record passed the cut has, though the slot trails by a status interval, or
	// was dropped by a retire stopped midway.
	one.Records[0].ConfirmedLSN = pglogrepl.LSN(300)
	one.Slots[0].ConfirmedFlush = pglogrepl.LSN(150)
	if !m.Passed(0) {
		t.Error("a slot at 150 whose record is at 300: behind; want passed")
	}
	one.Slots[0].Exists = false
	if !m.Passed(0) {
		t.Error("a missing slot whose record is at 300: behind; want passed")
	}
	if _, ok, err := shard.FindMove([]shard.SetState{one}); ok || err != nil {
		t.Errorf("one set: ok %t, err %v; want no move", ok, err)
	}
	one.Created = 0
	if _, _, err := shard.FindMove([]shard.SetState{one, two}); err == nil {
		t.Error("a set without a consistent point: nil error")
	}
}

// A retire stopped midway leaves the old set with some slots, or all, dropped and forgotten: that set
// is still the older one, and its gone slots passed the cut. A set with a slot that exists
// unrecorded, or recorded without a consistent point, cannot be placed.
func TestFindMoveAfterARetireCutShort(t *testing.T) {
	old := func(recs ...*registry.Record) shard.SetState {
		st := shard.SetState{Set: shard.Set{Slot: "walbox", Publication: "walbox", N: 2}, Records: recs}
		for k, r := range recs {
			st.Slots = append(st.Slots, inspect.Slot{Name: "walbox_s" + string(rune('0'+k)) + "of2", Exists: r != nil, ConfirmedFlush: 300})
		}
		return st
	}
	created := func(at pglogrepl.LSN) *registry.Record {
		return &registry.Record{CreatedLSN: at, ConfirmedLSN: 300}
	}
	to := shard.SetState{Set: shard.Set{Slot: "walbox", Publication: "walbox", N: 3}, Created: 200}
	for _, tc := range []struct {
		name     string
		from     shard.SetState
		ok, okTo bool // by FindMove; by FindMoveTo 3 shards
	}{
		{"one slot dropped and forgotten", old(nil, created(100)), true, true},
		{"every slot dropped and forgotten", old(nil, nil), false, true},
		{"a slot recorded without a consistent point", old(nil, created(0)), false, false},
		{"a slot recorded as created after the other set", old(nil, created(250)), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, sets := range [][]shard.SetState{{tc.from, to}, {to, tc.from}} {
				if _, ok, err := shard.FindMove(sets); ok != tc.ok || (err == nil) != tc.ok {
					t.Errorf("FindMove = %t, %v; want a move %t", ok, err, tc.ok)
				}
				m, ok, err := shard.FindMoveTo(sets, 3)
				if ok != tc.okTo || (err == nil) != tc.okTo {
					t.Fatalf("FindMoveTo 3 = %t, %v; want a move %t", ok, err, tc.okTo)
				}
				if ok && (m.To.Set.N != 3 || m.Cut != 200 || !m.Passed(0)) {
					t.Errorf("FindMoveTo 3 = %+v: want to the set of 3, cut 200, the gone slot passed", m)
				}
			}
		})
	}
	// A set gone whole is the newer one when the reshard moves into it: walbox reshard stopped
	// after it created the publications, before any slot. It has no cut yet.
	if _, ok, err := shard.FindMoveTo([]shard.SetState{old(nil, nil), to}, 2); ok || err == nil {
		t.Errorf("FindMoveTo 2 shards gone whole = %t, %v; want an error", ok, err)
	}
	unrecorded := old(nil, created(100))
	unrecorded.Slots[0].Exists = true
	if _, _, err := shard.FindMove([]shard.SetState{unrecorded, to}); err == nil {
		t.Error("a slot that exists unrecorded: nil error")
	}
}
