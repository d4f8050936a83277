package faults_test

import (
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
)

// An outbox row kept longer than two billion transactions (weeks at a thousand a second) is frozen,
// and its xmin alone no longer tells its age. Replay still sends it, before the newer rows.
func TestReplaySendsRowsOlderThanTwoBillionTransactions(t *testing.T) {
	heavy(t)
	pg := testenv.StartPostgres(t)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	// The slot would hold back the freezing of the catalogs; replay needs none.
	w.exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, w.slot)
	w.insertRows(10)
	oldIDs := map[string]bool{}
	for _, id := range w.texts("SELECT id::text FROM public.outbox") {
		oldIDs[id] = true
	}
	pg.JumpXID(t, 2_000_000_000)
	pg.JumpXID(t, 2_600_000_000)
	w.conn = pg.Conn(t, w.db)
	var age int64
	if err := w.conn.QueryRow(t.Context(), `SELECT pg_current_xact_id()::text::bigint - min(xmin::text::bigint) FROM public.outbox`).Scan(&age); err != nil {
		t.Fatal(err)
	}
	if age < 1<<31 {
		t.Fatalf("the first rows are %d transactions old; want more than 2^31", age)
	}
	w.insertRows(10)

	out, code := w.walbox(nil, "replay", "--rate=0")
	if code != 0 || !strings.Contains(out, "20 rows matched") {
		t.Fatalf("walbox replay exited %d; want 0 and 20 rows matched:\n%s", code, out)
	}
	got := map[string]int{}
	var order []string
	w.eachInQueue(w.queue, func(d amqp.Delivery) {
		got[d.MessageId]++
		order = append(order, d.MessageId)
	})
	w.checkEveryMatchedRow(got, "TRUE")
	for i, id := range order {
		if old := i < len(oldIDs); old != oldIDs[id] {
			t.Errorf("delivery %d is row %s, old %v; want the 10 old rows first", i, id, oldIDs[id])
		}
	}
}
