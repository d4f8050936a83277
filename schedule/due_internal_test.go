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
