package faults_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
)

// insertBadRow inserts a row with a reserved header, which the relay parks, and returns its id.
func (w *world) insertBadRow() string {
	w.t.Helper()
	id := uuid.NewString()
	w.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, headers)
		VALUES ($1, 'order', '1', 'order.bad', '{}', '{"x-walbox-mine": "1", "trace": "t"}')`, id)
	return id
}

// fixRow drops the reserved header of the row id.
func (w *world) fixRow(id string) {
	w.t.Helper()
	w.exec(`UPDATE outbox SET headers = '{"trace": "t"}' WHERE id = $1`, id)
}

// waitParked waits until walbox parked list shows every id, and returns the ids it shows, in order.
func (w *world) waitParked(env []string, ids ...string) []string {
	w.t.Helper()
	var got []string
	waitFor(w.t, time.Minute, "the parked rows listed", func() bool {
		got = parkedIDs(w.parked(0, append([]string{"list"}, env...)...))
		for _, id := range ids {
			if !slices.Contains(got, id) {
				return false
			}
		}
		return true
	})
	return got
}

// parkedIDs returns the ids of walbox parked list's output, in order.
func parkedIDs(out string) []string {
	var ids []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[0] == "ID" {
			continue
		}
		if _, err := time.Parse(time.RFC3339, f[len(f)-1]); err == nil || f[len(f)-1] == "-" { // parked at
			ids = append(ids, f[0])
		}
	}
	return ids
}

// countDelivered returns how often each id reached the world's queue so far.
func (w *world) countDelivered(into map[string]int) {
	w.t.Helper()
	w.eachInQueue(w.queue, func(d amqp.Delivery) { into[d.MessageId]++ })
}

// On a three-node cluster walbox's park queue is a quorum queue. Listing it again and again
// leaves every message there; each return shows in x-delivery-count. A replay after the fix
// delivers each once and empties the queue.
func TestParkedOnAQuorumQueueOfACluster(t *testing.T) {
	heavy(t)
	cluster := testenv.SharedCluster(t)
	w := clusterWorld(t, testenv.SharedPostgres(t), cluster, 1)
	w.relayMQ = strings.Join(cluster.URLs(), ",")
	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	a, b := w.insertBadRow(), w.insertBadRow()
	first := w.waitParked(nil, a, b)
	for range 3 {
		if got := w.waitParked(nil, a, b); len(got) != 2 {
			t.Fatalf("list shows %v, want %s and %s once each", got, a, b)
		}
	}
	if out := w.parked(0, "show", a); !strings.Contains(out, "x-delivery-count: ") {
		t.Errorf("show on a quorum queue does not show the returns:\n%s", out)
	}
	w.fixRow(a)
	w.fixRow(b)
	if out := w.parked(0, "replay", "--all"); strings.Count(out, "from the table row") != 2 {
		t.Fatalf("replay --all:\n%s", out)
	}
	got := map[string]int{}
	waitFor(t, time.Minute, "the replayed rows", func() bool { w.countDelivered(got); return got[a] > 0 && got[b] > 0 })
	if got[a] != 1 || got[b] != 1 {
		t.Errorf("delivered %v, want each of %v once", got, first)
	}
	if out := w.parked(0, "list"); !strings.Contains(out, "no parked messages") {
		t.Fatalf("list after the replay:\n%s", out)
	}
}

// walbox parked works for a broker user with rights on the exchange's own names only: configure,
// write and read on <exchange>, <exchange>.parked and <exchange>.unroutable. A user who may not
// read the park queue gets one line and exit 1.
func TestParkedByALeastPrivilegedBrokerUser(t *testing.T) {
	heavy(t)
	rabbit := testenv.SharedRabbit(t)
	testenv.RequireOwn(t, rabbit) // adds users to it
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	own := "^" + strings.ReplaceAll(w.exchange, ".", `\.`) + `(\.parked|\.unroutable)?$`
	user := func(read string) string {
		name := testenv.UniqueName("parkop")
		rabbit.Ctl(t, "add_user", name, "secret")
		rabbit.Ctl(t, "set_permissions", "-p", "/", name, own, own, read)
		t.Cleanup(func() { rabbit.Ctl(t, "delete_user", name) })
		return "WALBOX_AMQP_URL=" + strings.Replace(rabbit.URL(), "guest:guest@", name+":secret@", 1)
	}
	least, noRead := user(own), user("^"+strings.ReplaceAll(w.exchange, ".", `\.`)+`(\.unroutable)?$`)
	r := w.startRelay(least)
	r.waitState("streaming", time.Minute)
	a, b := w.insertBadRow(), w.insertBadRow()
	w.waitParked([]string{least}, a, b)
	out := w.parked(1, "list", noRead)
	if strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, "ACCESS_REFUSED") {
		t.Errorf("list by a user who may not read the park queue: want one line naming the refusal, got:\n%s", out)
	}
	w.fixRow(a)
	if out := w.parked(0, "replay", a, least); !strings.Contains(out, "replayed "+a) {
		t.Fatalf("replay:\n%s", out)
	}
	if out := w.parked(0, "discard", "--yes", b, least); !strings.Contains(out, "discarded "+b) {
		t.Fatalf("discard:\n%s", out)
	}
	if got := parkedIDs(w.parked(0, "list", least)); len(got) != 0 {
		t.Fatalf("list at the end shows %v", got)
	}
}

// Two databases relay to one broker, each to its own exchange, so each parks into its own
// queue. walbox parked with one's settings sees only its rows; the other's id is unknown
// (exit 2) and stays parked.
func TestParkedOfTwoDatabasesDoNotCross(t *testing.T) {
	heavy(t)
	pg, rabbit := testenv.SharedPostgres(t), testenv.SharedRabbit(t)
	one, two := newWorld(t, pg, rabbit), newWorld(t, pg, rabbit)
	for _, w := range []*world{one, two} {
		w.startRelay().waitState("streaming", time.Minute)
	}
	a, b := one.insertBadRow(), two.insertBadRow()
	if got := one.waitParked(nil, a); !slices.Equal(got, []string{a}) {
		t.Fatalf("the first database's list shows %v, want only %s", got, a)
	}
	if got := two.waitParked(nil, b); !slices.Equal(got, []string{b}) {
		t.Fatalf("the second database's list shows %v, want only %s", got, b)
	}
	one.parked(2, "replay", b)
	one.parked(2, "discard", "--yes", b)
	if got := parkedIDs(two.parked(0, "list")); !slices.Equal(got, []string{b}) {
		t.Fatalf("after the first database's attempts, the second lists %v, want %s", got, b)
	}
}

// Rows of a mapped table name their own exchange, which does not exist yet, and get a routing key
// from a template: both are parked. Once the exchange is declared, a replay sends each there with
// its routing key and original id: one read from the table, one deleted from it and rebuilt from
// its parked copy with its headers.
func TestParkedRowsGoToTheirOwnExchangeAndKey(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	w.exec("ALTER TABLE outbox ADD COLUMN target text")
	conf := filepath.Join(t.TempDir(), "walbox.yaml")
	yaml := "tables:\n  - table: public.outbox\n    exchange-column: target\n    routing-key: \"{aggregate_type}.{event_type}\"\n"
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := "WALBOX_CONFIG=" + conf
	w.startRelay(cfg).waitState("streaming", time.Minute)
	own := testenv.UniqueName("own")
	insert := func() string {
		id := uuid.NewString()
		w.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, headers, target)
			VALUES ($1, 'order', '1', 'order.moved', '{"n": 1}', '{"trace": "t"}', $2)`, id, own)
		return id
	}
	kept, gone := insert(), insert()
	w.waitParked([]string{cfg}, kept, gone)
	w.exec("DELETE FROM outbox WHERE id = $1", gone)

	conn, ch := dialAMQP(t, w.rabbit.URL())
	defer conn.Close()
	q := testenv.UniqueName("ownq")
	if err := ch.ExchangeDeclare(own, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q, "#", own, false, nil); err != nil {
		t.Fatal(err)
	}
	out := w.parked(0, "replay", "--all", cfg)
	if !strings.Contains(out, "replayed "+kept+" from the table row") || !strings.Contains(out, "replayed "+gone+" from the parked copy") {
		t.Fatalf("replay --all:\n%s", out)
	}
	got := map[string]amqp.Delivery{}
	waitFor(t, time.Minute, "both rows on their own exchange", func() bool {
		for {
			d, ok, err := ch.Get(q, true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return len(got) == 2
			}
			got[d.MessageId] = d
		}
	})
	for _, id := range []string{kept, gone} {
		d := got[id]
		if d.Exchange != own || d.RoutingKey != "order.order.moved" || d.Headers["trace"] != "t" || string(d.Body) != `{"n": 1}` {
			t.Errorf("%s arrived on %q with key %q, headers %v, body %s", id, d.Exchange, d.RoutingKey, d.Headers, d.Body)
		}
	}
}
