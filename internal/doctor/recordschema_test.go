package doctor_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/doctor"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/outbox"
)

// A role that may CREATE in the schema of another mapped table plants a registry there: a
// walbox_slots whose record of the slot is far ahead and stopped, and the record functions.
// doctor reads the record only in the schema of --table, and fails naming what was planted.
func TestRecordInAnotherSchemaIsIgnoredAndFails(t *testing.T) {
	e := setup(t)
	planterURL := e.roleURL(t, "LOGIN")
	planter := pgx.Identifier{roleOf(t, planterURL)}.Sanitize()
	e.pg.Exec(t, e.db, "CREATE SCHEMA legacy AUTHORIZATION "+planter)
	t.Cleanup(func() { e.pg.Exec(t, e.db, "DROP SCHEMA legacy CASCADE") })
	e.pg.Exec(t, e.db, "CREATE TABLE legacy.events (LIKE public.outbox INCLUDING ALL)")
	cfg := e.cfg
	cfg.Mappings = []outbox.Mapping{{Table: outbox.DefaultTable}, {Table: outbox.Table{Schema: "legacy", Name: "events"}}}
	if c := find(t, doctor.Run(t.Context(), cfg), "record_schema"); c.Status != "pass" {
		t.Errorf("record_schema before anything was planted: %s %q, want pass", c.Status, c.Message)
	}

	if _, err := migrations.ApplyRegistry(t.Context(), e.pg.Conn(t, planterURL), "legacy"); err != nil {
		t.Fatalf("plant a registry in legacy: %v", err)
	}
	e.pg.Exec(t, planterURL, "INSERT INTO legacy.walbox_slots (slot_name, system_identifier, timeline, origin, confirmed_lsn, stop_reason, stop_lsn) "+
		"VALUES ($1, '1', 1, 'created', 'FF/FFFFFFFF', 'planted', 'FF/FFFFFFFF')", cfg.Slot)

	checks := doctor.Run(t.Context(), cfg)
	c := find(t, checks, "record_schema")
	for _, want := range []string{`legacy.walbox_slots (owner `, `legacy.walbox_slot_confirm(`, "DROP TABLE legacy.walbox_slots"} {
		if c.Status != "fail" || !strings.Contains(c.Message+" "+c.Fix, want) {
			t.Errorf("record_schema with a registry planted in legacy: %s %q (fix %q), want a failure naming %s", c.Status, c.Message, c.Fix, want)
		}
	}
	if c := find(t, checks, "slot_record"); c.Status != "pass" || strings.Contains(c.Message, "planted") {
		t.Errorf("slot_record with a stopped record planted in legacy: %s %q, want the record of public, which passes", c.Status, c.Message)
	}
}
