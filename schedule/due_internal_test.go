package schedule

import (
	"context"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
)

// Many messages due at one instant are read a batch at a time, in order, without sorting them all.
// A sort at each batch made the sender several times slower than the relay (docs/bench/schedule.md).
func TestDueMessagesAreReadInOrderWithoutASort(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db, conn := pg.MigratedDatabase(t, migrations.Config{})
	pg.Exec(t, db, `INSERT INTO walbox_schedule (slot_name, message_id, deliver_at, id, aggregate_type, aggregate_id,
		event_type, payload, headers, amqp_id, routing_key, exchange)
		SELECT 's', u::text, pg_catalog.now(), u, 'order', '1', 'order.reminder', '{}', '{}', '', '', ''
		FROM (SELECT pg_catalog.gen_random_uuid() AS u FROM pg_catalog.generate_series(1, 20000)) g`)
	pg.Exec(t, db, "ANALYZE walbox_schedule")
	var plan string
	if err := conn.QueryRow(context.Background(), "EXPLAIN (FORMAT JSON) "+tablesIn("public").dueSQL(), "s", DefaultBatch, cancelLockClass).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plan, "Sort") {
		t.Errorf("the sender sorts every due message at each batch:\n%s", plan)
	}
}

// The messages of a batch go out in deliver_at order whatever order the rows arrive in.
func TestDueMessagesOfABatchAreInDeliverAtOrder(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	_, conn := pg.MigratedDatabase(t, migrations.Config{})
	rows, err := conn.Query(context.Background(), "SELECT '', g::text, pg_catalog.now() OPERATOR(pg_catalog.+) g * interval '1 second',"+
		" pg_catalog.gen_random_uuid(), 'order', '1', 'order.reminder', '{}'::jsonb, '{}', NULL::timestamptz, '', '', '',"+
		" NULL::timestamptz, interval '0', false FROM pg_catalog.generate_series(5, 1, -1) g")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := readDue(rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 5 {
		t.Fatalf("read %d messages, want 5", len(ds))
	}
	for i := 1; i < len(ds); i++ {
		if ds[i].msg.DeliverAt.Before(ds[i-1].msg.DeliverAt) {
			t.Errorf("message %d of the batch is due at %v, before message %d at %v: want deliver_at order",
				i, ds[i].msg.DeliverAt, i-1, ds[i-1].msg.DeliverAt)
		}
	}
}
