package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// walboxBin returns the walbox binary the tests run, race-built as the tests are.
func walboxBin(t *testing.T) string {
	t.Helper()
	return testenv.Build(t, "cmd/walbox", "-race")
}

// world is one test's database, slot, exchange and queue.
type world struct {
	t        *testing.T
	bin      string // the walbox binary: walboxBin unless the test needs another build
	pg       *testenv.Postgres
	rabbit   *testenv.Rabbit
	db       string
	conn     *pgx.Conn
	slot     string
	exchange string
	queue    string
}

func newWorld(t *testing.T, pg *testenv.Postgres, rabbit *testenv.Rabbit) *world {
	t.Helper()
	if testenv.Short() {
		t.Skip("end-to-end test: needs PostgreSQL and RabbitMQ")
	}
	db := pg.NewDatabase(t)
	w := &world{t: t, bin: walboxBin(t), pg: pg, rabbit: rabbit, db: db, conn: pg.Conn(t, db),
		slot: testenv.UniqueName("slot"), exchange: testenv.UniqueName("ex"), queue: testenv.UniqueName("q")}
	out, code := w.walbox(nil, "migrate")
	if code != 0 {
		t.Fatalf("walbox migrate exited %d:\n%s", code, out)
	}
	w.declareQueue()
	return w
}

func (w *world) env() []string {
	return append(os.Environ(),
		"WALBOX_DATABASE_URL="+w.db,
		"WALBOX_AMQP_URL="+w.rabbit.URL(),
		"WALBOX_SLOT="+w.slot,
		"WALBOX_EXCHANGE="+w.exchange,
		"WALBOX_STATUS_INTERVAL=100ms",
		"WALBOX_LOG_FORMAT=text",
		"WALBOX_LISTEN=off",        // tests that want the endpoints give a free port
		"WALBOX_RELAY_URL=off",     // so that status never reads another test's relay
		"WALBOX_CANARY_INTERVAL=0", // the tests read every message on #; a test that wants canaries sets it
	)
}

// binary returns the walbox binary the world runs: walboxBin unless the test set another.
func (w *world) binary() string {
	if w.bin == "" {
		return walboxBin(w.t)
	}
	return w.bin
}

// walbox runs a walbox command to completion and returns its combined output and exit code.
func (w *world) walbox(extraEnv []string, args ...string) (string, int) {
	w.t.Helper()
	cmd := exec.Command(w.binary(), args...)
	cmd.Env = append(w.env(), extraEnv...)
	return testenv.Run(w.t, cmd, 2*time.Minute)
}

// startRelay starts `walbox run` on the world; extraEnv settings win.
func (w *world) startRelay(extraEnv ...string) *testenv.Program {
	w.t.Helper()
	return w.startRelayEnv(append(w.env(), extraEnv...), "run")
}

// startRelayEnv starts walbox with exactly env and args.
func (w *world) startRelayEnv(env []string, args ...string) *testenv.Program {
	w.t.Helper()
	cmd := exec.Command(w.binary(), args...)
	cmd.Env = env
	return testenv.Start(w.t, cmd)
}

// txn is one committed outbox transaction.
type txn struct {
	ids    []uuid.UUID
	before pglogrepl.LSN // a WAL position before its commit record
}

// insertTx commits one transaction of n rows and returns it.
func (w *world) insertTx(conn *pgx.Conn, n int, eventType string) txn {
	w.t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	rows := make([][]any, n)
	ids := make([]uuid.UUID, n)
	for i := range rows {
		ids[i] = uuid.New()
		rows[i] = []any{ids[i], "order", fmt.Sprint(i % 7), eventType,
			fmt.Sprintf(`{"seq": %d, "note": "payload of row %d"}`, i, i),
			`{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme"}`}
	}
	_, err = tx.CopyFrom(ctx, pgx.Identifier{"outbox"},
		[]string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers"}, pgx.CopyFromRows(rows))
	if err != nil {
		w.t.Fatal(err)
	}
	var before pglogrepl.LSN
	if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()").Scan(&before); err != nil {
		w.t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		w.t.Fatal(err)
	}
	return txn{ids: ids, before: before}
}

func (w *world) slotLSN() pglogrepl.LSN {
	w.t.Helper()
	var lsn pglogrepl.LSN
	if err := w.conn.QueryRow(context.Background(),
		"SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1", w.slot).Scan(&lsn); err != nil {
		w.t.Fatal(err)
	}
	return lsn
}

// waitSlotReleased waits until no walsender holds slot.
func (w *world) waitSlotReleased(slot string) {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var active bool
		if err := w.conn.QueryRow(context.Background(),
			"SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active); err != nil {
			w.t.Fatal(err)
		}
		if !active {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("slot %s still active 30s after its relays were killed", slot)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// declareQueue declares the test's exchange and a durable queue bound to every routing key.
func (w *world) declareQueue() {
	w.t.Helper()
	conn, ch := w.amqp()
	defer conn.Close()
	// Declared as walbox declares it, with its default alternate exchange.
	if err := ch.ExchangeDeclare(w.exchange+".unroutable", "fanout", true, false, false, false, nil); err != nil {
		w.t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(w.exchange, "topic", true, false, false, false,
		amqp.Table{"alternate-exchange": w.exchange + ".unroutable"}); err != nil {
		w.t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(w.queue, true, false, false, false, nil); err != nil {
		w.t.Fatal(err)
	}
	if err := ch.QueueBind(w.queue, "#", w.exchange, false, nil); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) amqp() (*amqp.Connection, *amqp.Channel) {
	w.t.Helper()
	var conn *amqp.Connection
	var err error
	for range 50 {
		if conn, err = amqp.Dial(w.rabbit.URL()); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		w.t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		w.t.Fatal(err)
	}
	return conn, ch
}

// drain consumes from the queue until every message of txns has arrived (counting those in
// already) or timeout passes, and returns the deliveries it consumed, in arrival order.
func (w *world) drain(txns []txn, already []amqp.Delivery, timeout time.Duration) []amqp.Delivery {
	w.t.Helper()
	missing := map[string]bool{}
	for _, id := range allIDs(txns) {
		missing[id.String()] = true
	}
	for _, d := range already {
		delete(missing, d.MessageId)
	}
	conn, ch := w.amqp()
	defer conn.Close()
	if err := ch.Qos(1000, 0, false); err != nil {
		w.t.Fatal(err)
	}
	deliveries, err := ch.Consume(w.queue, "", false, false, false, false, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	var got []amqp.Delivery
	deadline := time.After(timeout)
	for len(missing) > 0 {
		select {
		case d, ok := <-deliveries:
			if !ok {
				w.t.Fatalf("consumer closed with %d messages missing", len(missing))
			}
			got = append(got, d)
			delete(missing, d.MessageId)
			if err := d.Ack(false); err != nil {
				w.t.Fatal(err)
			}
		case <-deadline:
			w.t.Fatalf("%d messages still missing after %v", len(missing), timeout)
		}
	}
	return got
}

// drainQuiet consumes whatever the queue holds until it stays quiet for quiet.
func (w *world) drainQuiet(quiet time.Duration) []amqp.Delivery {
	w.t.Helper()
	conn, ch := w.amqp()
	defer conn.Close()
	deliveries, err := ch.Consume(w.queue, "", true, false, false, false, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	var got []amqp.Delivery
	for {
		select {
		case d := <-deliveries:
			got = append(got, d)
		case <-time.After(quiet):
			return got
		}
	}
}

// checkAll verifies that every row of txns arrived, and returns the number of duplicates.
func checkAll(t *testing.T, txns []txn, got []amqp.Delivery) int {
	t.Helper()
	count := map[string]int{}
	for _, d := range got {
		count[d.MessageId]++
	}
	missing, dups := 0, 0
	committed := map[string]bool{}
	for _, x := range txns {
		for _, id := range x.ids {
			committed[id.String()] = true
			if count[id.String()] == 0 {
				missing++
			}
		}
	}
	for id, n := range count {
		if !committed[id] {
			t.Errorf("message %s was delivered but never committed", id)
		}
		dups += n - 1
	}
	if missing > 0 {
		t.Fatalf("%d committed messages never arrived", missing)
	}
	return dups
}

func allIDs(txns []txn) []uuid.UUID {
	var out []uuid.UUID
	for _, x := range txns {
		out = append(out, x.ids...)
	}
	return out
}
