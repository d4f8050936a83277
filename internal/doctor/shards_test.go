package doctor_test

import (
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
