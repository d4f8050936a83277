package replication_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/wire"
)

// Every slot receives every logical decoding message.
// So the relays of a set of shards share them out by aggregate id.
// Exactly one shard's relay publishes each emitted message.
// Exactly one parks a message to be parked (not transactional, or malformed), not each shard's.
func TestShardsShareOutEmittedAndParkedMessages(t *testing.T) {
	const n = 3
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	ctx := context.Background()
	set := shard.Set{Slot: e.slot, Publication: "walbox", N: n}
	if _, err := shard.CreatePublications(ctx, e.conn, wire.DefaultTable, set); err != nil {
		t.Fatal(err)
	}
	brokers := make([]*fakeBroker, n)
	for k := range n {
		if _, err := slots.EnsureSlot(ctx, e.db, set.SlotName(k), set.PublicationName(k), []wire.Table{wire.DefaultTable}, registry.New(e.conn, "public")); err != nil {
			t.Fatal(err)
		}
		brokers[k] = newFakeBroker(true)
		sub := &env{t: t, pg: e.pg, db: e.db, conn: e.conn, slot: set.SlotName(k), broker: brokers[k]}
		sub.start(func(c *replication.Config) {
			c.Publication, c.Shard, c.Shards = set.PublicationName(k), k, n
		})
	}

	var emitted []uuid.UUID
	for i := range 30 {
		var id uuid.UUID
		if err := e.conn.QueryRow(ctx, `SELECT walbox_emit('order', $1, 'order.created', '{}')`, fmt.Sprint(i)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		emitted = append(emitted, id)
	}
	nonTx := uuid.New()
	if _, err := e.conn.Exec(ctx, `SELECT pg_logical_emit_message(false, 'walbox', format(
		'{"v": 1, "id": "%s", "aggregate_type": "order", "aggregate_id": "7", "event_type": "order.created", "payload": {}}', $1::text))`,
		nonTx.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.conn.Exec(ctx, `SELECT pg_logical_emit_message(true, 'walbox', 'not json')`); err != nil {
		t.Fatal(err)
	}
	last, err := e.conn.Exec(ctx, `SELECT walbox_emit('order', 'last', 'order.created', '{}')`)
	if err != nil || last.RowsAffected() != 1 {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "every emitted message published", func() bool {
		total := 0
		for _, b := range brokers {
			total += len(b.messages())
		}
		return total >= len(emitted)+1
	})
	time.Sleep(time.Second) // anything published or parked twice arrives meanwhile

	seen := map[uuid.UUID]int{}
	parked := 0
	for k, b := range brokers {
		for _, m := range b.messages() {
			seen[m.ID]++
			if got := shard.Of(m.AggregateID, n); got != k {
				t.Errorf("shard %d published %s of aggregate %q, which is shard %d's", k, m.ID, m.AggregateID, got)
			}
		}
		for _, p := range b.parkedMessages() {
			parked++
			t.Logf("shard %d parked %s: %s", k, p.Message.ID, p.Reason)
		}
	}
	for _, id := range emitted {
		if seen[id] != 1 {
			t.Errorf("message %s published %d times, want once", id, seen[id])
		}
	}
	if parked != 2 {
		t.Errorf("%d messages parked across %d shards, want 2 (the non-transactional and the malformed one, once each)", parked, n)
	}
}

// Each shard's relay relays its own canary, whatever shard its aggregate id hashes to, and no other.
func TestShardsEachRelayTheirOwnCanary(t *testing.T) {
	const n = 3
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	ctx := context.Background()
	set := shard.Set{Slot: e.slot, Publication: "walbox", N: n}
	if _, err := shard.CreatePublications(ctx, e.conn, wire.DefaultTable, set); err != nil {
		t.Fatal(err)
	}
	brokers := make([]*fakeBroker, n)
	for k := range n {
		if _, err := slots.EnsureSlot(ctx, e.db, set.SlotName(k), set.PublicationName(k), []wire.Table{wire.DefaultTable}, registry.New(e.conn, "public")); err != nil {
			t.Fatal(err)
		}
		brokers[k] = newFakeBroker(true)
		sub := &env{t: t, pg: e.pg, db: e.db, conn: e.conn, slot: set.SlotName(k), broker: brokers[k]}
		sub.start(func(c *replication.Config) {
			c.Publication, c.Shard, c.Shards, c.Canary = set.PublicationName(k), k, n, set.SlotName(k)
		})
	}
	for k := range n {
		if _, err := e.conn.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, format(
			'{"v": 1, "id": "%s", "aggregate_type": "walbox.canary", "aggregate_id": "%s", "event_type": "walbox.canary", "payload": {}}',
			gen_random_uuid(), $2::text))`, wire.CanaryPrefix, set.SlotName(k)); err != nil {
			t.Fatal(err)
		}
	}
	for k, b := range brokers {
		b.waitPublished(t, 1)
		time.Sleep(500 * time.Millisecond) // another shard's canary, if relayed, arrives meanwhile
		if got := b.messages(); len(got) != 1 || got[0].AggregateID != set.SlotName(k) || got[0].Key() != wire.CanaryEventType {
			t.Errorf("shard %d relayed %+v; want its own canary only, to %s", k, got, wire.CanaryEventType)
		}
	}
}
