package doctor_test

import (
	"context"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/doctor"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/slots"
)

// doctor reads every shard's slot and record, as each shard's walbox run would: a shard slot
// advanced behind walbox's back fails slot_record, naming it, and a missing one is named too.
// The old doctor read the single slot alone and passed.
func TestShardSlotsAndRecordsAreChecked(t *testing.T) {
	e := setup(t)
	ctx := t.Context()
	set := shard.Set{Slot: e.cfg.Slot, Publication: "walbox", N: 2}
	if _, err := shard.CreatePublications(ctx, e.conn, outbox.DefaultTable, set); err != nil {
		t.Fatal(err)
	}
	for k := range 2 {
		if _, err := slots.EnsureSlot(ctx, e.db, set.SlotName(k), set.PublicationName(k), []outbox.Table{outbox.DefaultTable},
			registry.New(e.conn, "public")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = slots.Drop(t.Context(), e.conn, set.SlotName(k)) })
	}
	shardRecords := func(checks []doctor.Check) (names []string, failed []doctor.Check) {
		for _, c := range checks {
			if c.Name == "slot_record" {
				names = append(names, c.Message)
				if c.Status == "fail" {
					failed = append(failed, c)
				}
			}
		}
		return names, failed
	}
	names, failed := shardRecords(doctor.Run(ctx, e.cfg))
	for k := range 2 {
		if !strings.Contains(strings.Join(names, "\n"), set.SlotName(k)) {
			t.Fatalf("no slot_record check names %s:\n%s", set.SlotName(k), strings.Join(names, "\n"))
		}
	}
	if len(failed) != 0 {
		t.Fatalf("slot_record failed on a good sharded setup: %+v", failed)
	}

	e.pg.Exec(t, e.db, "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('a', '1', 'e', '{}')")
	e.pg.Exec(t, e.db, "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", set.SlotName(1))
	_, failed = shardRecords(doctor.Run(ctx, e.cfg))
	if len(failed) != 1 || !strings.Contains(failed[0].Message, set.SlotName(1)) || !strings.Contains(failed[0].Message, "ahead of") {
		t.Fatalf("slot_record failures after shard 1's slot was advanced: %+v; want one, naming %s ahead of its record", failed, set.SlotName(1))
	}
}

// A reshard or its --retire stopped midway leaves slots missing and unrecorded. Doctor's way out
// for them is the rerun, not walbox migrate, which would create an old slot anew at the current
// position and leave the reshard unable to tell its sets apart.
func TestSlotsGoneInAReshardStoppedMidway(t *testing.T) {
	e := setup(t)
	ctx := t.Context()
	fixOf := func(slot string) string {
		t.Helper()
		for _, c := range doctor.Run(ctx, e.cfg) {
			if c.Name == "slot" && strings.Contains(c.Message, slot+" does not exist") {
				return c.Fix
			}
		}
		t.Fatalf("no slot check says %s does not exist", slot)
		return ""
	}
	// Killed at reshard.published: the new set's publications alone.
	to := shard.Set{Slot: e.cfg.Slot, Publication: "walbox", N: 2}
	if _, err := shard.CreatePublications(ctx, e.conn, outbox.DefaultTable, to); err != nil {
		t.Fatal(err)
	}
	if fix := fixOf(to.SlotName(0)); strings.Contains(fix, "walbox migrate`") || !strings.Contains(fix, "run it again") {
		t.Errorf("the way out for a slot a reshard did not create yet: %q; want the rerun", fix)
	}
	cfg := slots.ReshardConfig{Conn: e.conn, DatabaseURL: e.db, Table: outbox.DefaultTable, Base: shard.Set{Slot: e.cfg.Slot, Publication: "walbox"},
		Tables: []outbox.Table{outbox.DefaultTable}, Shards: 2}
	if _, err := slots.Reshard(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for k := range 2 {
			_ = slots.Drop(context.Background(), e.conn, to.SlotName(k))
		}
	})
	// Killed at retire.forgot: the single slot dropped and forgotten, its publication left.
	if err := slots.Drop(ctx, e.conn, e.cfg.Slot); err != nil {
		t.Fatal(err)
	}
	if err := registry.New(e.conn, "public").Forget(ctx, e.cfg.Slot); err != nil {
		t.Fatal(err)
	}
	if fix := fixOf(e.cfg.Slot); strings.Contains(fix, "walbox migrate`") || !strings.Contains(fix, "run it again") {
		t.Errorf("the way out for the slot a retire dropped: %q; want the rerun", fix)
	}
}
