package canary_test

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/canary"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/wire"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const interval = 500 * time.Millisecond

// A relay role with LOGIN REPLICATION and no grant writes the canary: pg_logical_emit_message
// needs no privilege. The canary declares its queue and binds it. A logical decoding message is
// not filtered by the publication, so the canary checks the publication itself: once it drops
// the outbox table, Problem names it within two intervals, without waiting for the canary's age.
func TestCanaryWritesAsTheRelayRoleAndSeesThePublicationDropTheTable(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL and RabbitMQ")
	}
	pg, rabbit := testenv.SharedPostgres(t), testenv.SharedRabbit(t)
	testenv.RequireOwn(t, pg) // an external server may not admit the new role
	db, conn := pg.MigratedDatabase(t, migrations.Config{})
	role := testenv.UniqueName("relay")
	pg.Exec(t, db, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN REPLICATION")
	t.Cleanup(func() { pg.Exec(t, db, "DROP ROLE "+pgx.Identifier{role}.Sanitize()) })
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	peek := testenv.UniqueName("peek")
	pg.Exec(t, db, "SELECT pg_create_logical_replication_slot($1, 'test_decoding')", peek)
	t.Cleanup(func() { pg.Exec(t, db, "SELECT pg_drop_replication_slot($1)", peek) })

	exchange := testenv.UniqueName("ex")
	eps, err := publisher.NewEndpoints(publisher.Config{Exchange: exchange}, []string{rabbit.URL()})
	if err != nil {
		t.Fatal(err)
	}
	ch := testenv.Channel(t, rabbit.URL())
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	slot := testenv.UniqueName("slot")
	queues := make(chan string, 100)
	dial := func(ctx context.Context, q string) (canary.Reader, error) { queues <- q; return eps.DialCanary(ctx, q) }
	c, err := canary.New(canary.Config{Interval: interval, DatabaseURL: u.String(), Slot: slot, Exchange: exchange,
		Publication: wire.DefaultPublication, Tables: []wire.Table{wire.DefaultTable}, Dial: dial,
		Active: func() bool { return true }, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	eventually(t, "a canary in the WAL", func() bool {
		var n int
		err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_logical_slot_peek_changes($1, NULL, NULL) WHERE data LIKE $2",
			peek, "message: transactional: 1 prefix: "+wire.CanaryPrefix+"%"+slot+"%").Scan(&n)
		return err == nil && n > 0
	})
	var system, database string
	if err := conn.QueryRow(t.Context(), "SELECT system_identifier::text, current_database()::text FROM pg_control_system()").Scan(&system, &database); err != nil {
		t.Fatal(err)
	}
	queue := <-queues
	if want := canary.Queue(exchange, system, database, slot, ""); !strings.HasPrefix(queue, want) {
		t.Fatalf("canary queue %s, want one starting %s", queue, want)
	}
	// Not exclusive to the canary's connection: an operator may look at it, and unbind it.
	if _, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
		t.Fatalf("canary queue %s declared from another connection: %v", queue, err)
	}
	if why := c.Problem(); why != "" && !strings.Contains(why, "none came back") {
		t.Fatalf("Problem() = %q before the publication changed", why)
	}
	pg.Exec(t, db, "ALTER PUBLICATION "+wire.DefaultPublication+" DROP TABLE "+wire.DefaultTable.Quoted())
	deadline := time.Now().Add(2*interval + 10*time.Second)
	for !strings.Contains(c.Problem(), "publication") {
		if time.Now().After(deadline) {
			t.Fatalf("Problem() = %q two intervals after the publication dropped the table", c.Problem())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("Problem: %s", c.Problem())
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Each reader, database and slot has a queue of its own under the exchange's name, at most 255 bytes.
func TestQueueNamesAreDistinctAndFitAMQP(t *testing.T) {
	long := strings.Repeat("x", 63)
	names := map[string]bool{}
	for _, q := range []string{
		canary.Queue("outbox", "7301", "app", "walbox", "r1"),
		canary.Queue("outbox", "7301", "app", "walbox", "r2"),
		canary.Queue("outbox", "7302", "app", "walbox", "r1"),
		canary.Queue("outbox", "7301", "billing", "walbox", "r1"),
		canary.Queue("outbox", "7301", "app", "walbox_1_of_4", "r1"),
		canary.Queue(strings.Repeat("e", 200), "7301", long, long, "r1"),
		canary.Queue(strings.Repeat("e", 200), "7301", long, long, "r2"),
	} {
		if len(q) > 255 || !strings.HasPrefix(q, "outbox.walbox.canary.") && !strings.HasPrefix(q, "eeee") || names[q] {
			t.Errorf("queue %q: want a distinct name under the exchange's, of at most 255 bytes", q)
		}
		names[q] = true
	}
	if got := canary.Queue("outbox", "7301", "app", "walbox", "r1"); got != "outbox.walbox.canary.walbox.app.7301.r1" {
		t.Errorf("Queue = %q", got)
	}
}
