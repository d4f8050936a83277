package checker_test

import (
	"context"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/test/checker"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// outboxDB returns a fresh database with the outbox table.
func outboxDB(t *testing.T) string {
	t.Helper()
	if testenv.Short() {
		t.Skip("needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	if _, err := migrations.Apply(t.Context(), pg.Conn(t, db), migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	return db
}

func TestWriterRecordsWhatCommitted(t *testing.T) {
	db := outboxDB(t)
	w, err := checker.NewWriter(checker.WriterConfig{DatabaseURL: db, Seed: 1, MaxRows: 500, MaxTx: 30, Aggregates: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.Close()
	committed := w.Committed()
	if st := w.Stats(); len(committed) != 500 || st.Rows != 500 || st.Failed != 0 {
		t.Fatalf("committed %d rows, stats %+v; want 500 rows and no failures", len(committed), st)
	}

	// Every committed row is in the table with the payload the verifier expects, and each
	// aggregate's seqs count up from 1 in commit order.
	conn := testenv.SharedPostgres(t).Conn(t, db)
	stored := map[string]checker.Delivery{}
	res, err := conn.Query(t.Context(), "SELECT id::text, payload::text FROM outbox")
	if err != nil {
		t.Fatal(err)
	}
	for res.Next() {
		var id, body string
		if err := res.Scan(&id, &body); err != nil {
			t.Fatal(err)
		}
		stored[id] = checker.Parse(id, []byte(body))
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	next := map[string]int64{}
	for _, r := range committed {
		next[r.Aggregate]++
		if r.Seq != next[r.Aggregate] {
			t.Fatalf("row %s of %s has seq %d, want %d", r.ID, r.Aggregate, r.Seq, next[r.Aggregate])
		}
		d, ok := stored[r.ID]
		if !ok || d.Malformed || d.Aggregate != r.Aggregate || d.Seq != r.Seq {
			t.Fatalf("row %+v is stored as %+v (present %t)", r, d, ok)
		}
	}
	if len(stored) != len(committed) || len(next) != 4 {
		t.Fatalf("table holds %d rows over %d aggregates, want %d over 4", len(stored), len(next), len(committed))
	}
}

func TestWriterIsReproducible(t *testing.T) {
	db := outboxDB(t)
	other := outboxDB(t)
	write := func(db, name string) []checker.Row {
		w, err := checker.NewWriter(checker.WriterConfig{DatabaseURL: db, Name: name, Seed: 7, MaxRows: 50})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if err := w.Run(t.Context()); err != nil {
			t.Fatal(err)
		}
		return w.Committed()
	}
	a, b := write(db, "w"), write(other, "w")
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("row %d: %+v, then %+v with the same seed", i, a[i], b[i])
		}
	}
	// A second writer of another name shares the table without colliding.
	if c := write(db, "v"); c[0].ID == a[0].ID {
		t.Fatal("writers of different names drew the same ids")
	}
}

func TestVerifierConsumesAcrossReconnects(t *testing.T) {
	if testenv.Short() {
		t.Skip("needs RabbitMQ")
	}
	rabbit := testenv.SharedRabbit(t)
	testenv.RequireOwn(t, rabbit) // closes the node's connections with rabbitmqctl
	queue := testenv.UniqueName("checker")
	publish := func(id, body string) {
		t.Helper()
		conn, err := amqp.Dial(rabbit.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.PublishWithContext(t.Context(), "", queue, false, false,
			amqp.Publishing{MessageId: id, Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { rabbit.Ctl(t, "delete_queue", queue) })
	committed := []checker.Row{{ID: "m1", Aggregate: "A", Seq: 1}, {ID: "m2", Aggregate: "A", Seq: 2}, {ID: "m3", Aggregate: "B", Seq: 1}}
	publish("m1", `{"aggregate": "A", "seq": 1}`)
	publish("m2", `{"aggregate": "A", "seq": 2}`)

	v, err := checker.NewVerifier(checker.VerifierConfig{URL: rabbit.URL(), Queue: queue, Quiet: 200 * time.Millisecond, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	v.Start(context.Background())
	defer v.Stop()
	for v.Count() < 2 {
		time.Sleep(20 * time.Millisecond)
	}
	// Cut the verifier's connection: it reconnects and goes on.
	rabbit.Ctl(t, "close_all_connections", "test")
	publish("m1", `{"aggregate": "A", "seq": 1}`) // a replay
	publish("ghost", `{"aggregate": "B", "seq": 5}`)
	publish("m3", `{"aggregate": "B", "seq": 1}`)

	rep := v.Await(t.Context(), committed, 30*time.Second)
	t.Logf("%s (reconnects %d)", rep, v.Reconnects())
	if rep.Lost != 0 || rep.Phantom != 1 || rep.Duplicated != 1 || rep.OrderViolations != 0 || rep.TimedOut {
		t.Fatalf("report %s: want 0 lost, 1 phantom, 1 duplicated, no order violation", rep)
	}
	if rep.Err() == nil {
		t.Fatal("Err = nil with a phantom")
	}
}
