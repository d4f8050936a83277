package schedule_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/schedule"
	"github.com/walbox/walbox/wire"
)

// A message due in 30 days is cancelled before its slot's relay read it: walbox_cancel says true. That
// relay stays down for more than a week. Another shard's sender prunes meanwhile: the tombstone stays,
// since the slot is behind it. The relay, back, reads the message and does not record it.
func TestATombstoneOutlivesAWeekWhileItsSlotIsBehind(t *testing.T) {
	pg, db, conn := scheduleDB(t)
	ctx := context.Background()
	slot := testenv.UniqueName("lagging")
	pg.Exec(t, db, "SELECT pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput')", slot)
	t.Cleanup(func() { pg.Exec(t, db, "SELECT pg_catalog.pg_drop_replication_slot($1)", slot) })
	pg.Exec(t, db, `INSERT INTO walbox_slots (slot_name, system_identifier, timeline, origin, confirmed_lsn, confirmed_xmin)
		SELECT $1::text, c.system_identifier::text, 1, 'created', s.confirmed_flush_lsn, pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())
		FROM pg_catalog.pg_control_system() c, pg_catalog.pg_replication_slots s WHERE s.slot_name = $1::text`, slot)
	id := uuid.New()
	var waiting bool
	if err := conn.QueryRow(ctx, "SELECT walbox_cancel($1::uuid)", id).Scan(&waiting); err != nil || !waiting {
		t.Fatalf("walbox_cancel: %v %v, want true", waiting, err)
	}
	// A week on. The sent note is the mark of the prune: it goes by age.
	pg.Exec(t, db, `UPDATE walbox_schedule_done SET done_at = pg_catalog.now() - interval '8 days';
		INSERT INTO walbox_schedule_done (message_id, slot_name, state, sent_by, done_at)
		VALUES ('mark', '', 'sent', '{other}', pg_catalog.now() - interval '8 days')`)
	stop := run(schedule.NewSender(schedule.SenderConfig{DatabaseURL: db, Schema: "public", Slot: "other",
		Dial: newBroker().dialer(), Active: func() bool { return true }}))
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var marked bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM walbox_schedule_done WHERE message_id = 'mark')").Scan(&marked); err != nil {
			t.Fatal(err)
		}
		if !marked {
			break
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatal("no prune within a minute")
		}
	}
	stop()
	// The slot's relay reads the message only now.
	m := &wire.Message{ID: id, EventType: "order.reminder", Payload: []byte(`{}`), DeliverAt: time.Now().Add(30 * 24 * time.Hour)}
	if c := recordAs(t, db, slot, m); c.Err != nil {
		t.Fatal(c.Err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM walbox_schedule WHERE message_id = $1", id.String()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("a message cancelled (walbox_cancel said true) was recorded after a prune while its slot was behind: it will be sent")
	}
}
