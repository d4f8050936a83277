package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/outbox"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// newDB creates a database with the outbox table (and its publication) and returns a connection
// to it and its URL.
func newDB(tb testing.TB) (*pgx.Conn, string) {
	tb.Helper()
	if testenv.Short() {
		tb.Skip("integration test: needs PostgreSQL")
	}
	p := testenv.SharedPostgres(tb)
	url := p.NewDatabase(tb)
	conn := p.Conn(tb, url)
	if _, err := migrations.Apply(context.Background(), conn, migrations.Config{}); err != nil {
		tb.Fatalf("apply migrations: %v", err)
	}
	return conn, url
}

func msg(n int) outbox.Message {
	return outbox.Message{
		AggregateType: "order",
		AggregateID:   fmt.Sprint(n),
		EventType:     "order.created",
		Payload:       []byte(fmt.Sprintf(`{"n": %d}`, n)),
	}
}

// inTx runs fn in a transaction on conn and commits it.
func inTx(tb testing.TB, conn *pgx.Conn, fn func(tx pgx.Tx) error) error {
	tb.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		tb.Fatalf("begin: %v", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		tb.Fatalf("commit: %v", err)
	}
	return nil
}

type row struct {
	ID            uuid.UUID
	AggregateType string
	AggregateID   string
	EventType     string
	Payload       map[string]any
	Headers       map[string]any
	CreatedAt     time.Time
}

// readRows returns the rows of table in insertion order.
func readRows(tb testing.TB, conn *pgx.Conn, table string) []row {
	tb.Helper()
	rows, err := conn.Query(context.Background(), "SELECT id, aggregate_type, aggregate_id, event_type, payload, headers, created_at FROM "+table+" ORDER BY ctid")
	if err != nil {
		tb.Fatalf("query %s: %v", table, err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		tb.Fatalf("read %s: %v", table, err)
	}
	return got
}

func count(tb testing.TB, conn *pgx.Conn, table string) int {
	tb.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		tb.Fatalf("count %s: %v", table, err)
	}
	return n
}

func TestWriteCommitsWithBusinessRow(t *testing.T) {
	conn, _ := newDB(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "CREATE TABLE orders (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	var txNow time.Time
	err := inTx(t, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES (1)"); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, "SELECT now()").Scan(&txNow); err != nil {
			return err
		}
		return outbox.Write(ctx, tx, msg(1), msg(2))
	})
	if err != nil {
		t.Fatalf("write: %v", err)
	}

	if got, want := count(t, conn, "orders"), 1; got != want {
		t.Errorf("orders: got %d rows, want %d", got, want)
	}
	rows := readRows(t, conn, "outbox")
	if got, want := len(rows), 2; got != want {
		t.Fatalf("outbox: got %d rows, want %d", got, want)
	}
	for i, r := range rows {
		if got, want := r.AggregateID, fmt.Sprint(i+1); got != want {
			t.Errorf("row %d: aggregate_id %q, want %q (rows out of order?)", i, got, want)
		}
		if r.AggregateType != "order" || r.EventType != "order.created" {
			t.Errorf("row %d: got %q %q, want order order.created", i, r.AggregateType, r.EventType)
		}
		if got, want := r.Payload["n"], float64(i+1); got != want {
			t.Errorf("row %d: payload n = %v, want %v", i, got, want)
		}
		if got, want := r.ID.Version(), uuid.Version(7); got != want {
			t.Errorf("row %d: id %s is version %d, want %d", i, r.ID, got, want)
		}
		if len(r.Headers) != 0 {
			t.Errorf("row %d: headers %v, want {}", i, r.Headers)
		}
		if !r.CreatedAt.Equal(txNow) {
			t.Errorf("row %d: created_at %v, want the transaction's now() %v", i, r.CreatedAt, txNow)
		}
	}
	if rows[0].ID == rows[1].ID {
		t.Errorf("both rows have id %s", rows[0].ID)
	}
}

func TestWriteRollbackLeavesNothing(t *testing.T) {
	conn, _ := newDB(t)
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.Write(ctx, tx, msg(1), msg(2)); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if got := count(t, conn, "outbox"); got != 0 {
		t.Errorf("outbox has %d rows after rollback, want 0", got)
	}
}

func TestWriteKeepsGivenIDAndCreatedAt(t *testing.T) {
	conn, _ := newDB(t)
	ctx := context.Background()
	id := uuid.MustParse("0190f5a2-7c3e-7def-8a1b-123456789abc")
	at := time.Date(2024, 7, 1, 12, 30, 0, 123456000, time.UTC)
	given := msg(1)
	given.ID, given.CreatedAt = id, at
	err := inTx(t, conn, func(tx pgx.Tx) error { return outbox.Write(ctx, tx, given, msg(2)) })
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	rows := readRows(t, conn, "outbox")
	if got, want := len(rows), 2; got != want {
		t.Fatalf("got %d rows, want %d", got, want)
	}
	if rows[0].ID != id || !rows[0].CreatedAt.Equal(at) {
		t.Errorf("row 0: got id %s created_at %v, want %s %v", rows[0].ID, rows[0].CreatedAt, id, at)
	}
	if d := time.Since(rows[1].CreatedAt); d < 0 || d > time.Minute {
		t.Errorf("row 1: created_at %v, want now", rows[1].CreatedAt)
	}
}

func TestWriteNothingIsANoOp(t *testing.T) {
	if err := outbox.Write(context.Background(), nil); err != nil {
		t.Errorf("Write with no messages: %v", err)
	}
}

func TestWriteBatchOf1000(t *testing.T) {
	conn, _ := newDB(t)
	ctx := context.Background()
	msgs := make([]outbox.Message, 1000)
	for i := range msgs {
		msgs[i] = msg(i)
	}
	if err := inTx(t, conn, func(tx pgx.Tx) error { return outbox.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatalf("write: %v", err)
	}
	rows := readRows(t, conn, "outbox")
	if got, want := len(rows), len(msgs); got != want {
		t.Fatalf("got %d rows, want %d", got, want)
	}
	for i, r := range rows {
		if got, want := r.AggregateID, fmt.Sprint(i); got != want {
			t.Fatalf("row %d: aggregate_id %q, want %q: order not kept", i, got, want)
		}
	}
}

func TestWriteToOtherTable(t *testing.T) {
	conn, _ := newDB(t)
	ctx := context.Background()
	table := outbox.Table{Schema: "app", Name: "Events"} // mixed case: must be quoted
	if _, err := conn.Exec(ctx, "CREATE SCHEMA app"); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, conn, migrations.Config{Table: table, Publication: "app_events"}); err != nil {
		t.Fatalf("apply migrations: %v", err)
	}
	w := outbox.NewWriter(table)
	if err := inTx(t, conn, func(tx pgx.Tx) error { return w.Write(ctx, tx, msg(1)) }); err != nil {
		t.Fatalf("write: %v", err)
	}
	if got, want := count(t, conn, table.Quoted()), 1; got != want {
		t.Errorf("%s: got %d rows, want %d", table, got, want)
	}
	if got := count(t, conn, "outbox"); got != 0 {
		t.Errorf("default table: got %d rows, want 0", got)
	}
}

func TestDeleteAfterInsertLeavesTableEmptyButPublishes(t *testing.T) {
	conn, _ := newDB(t)
	ctx := context.Background()
	slot := testenv.UniqueName("producer")
	if _, err := conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot); err != nil {
		t.Fatalf("create slot: %v", err)
	}
	w := outbox.NewWriter(outbox.DefaultTable, outbox.DeleteAfterInsert())
	err := inTx(t, conn, func(tx pgx.Tx) error {
		// Flush the commit record at once (the test server runs with synchronous_commit off), so
		// the slot can decode it right away.
		if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
			return err
		}
		return w.Write(ctx, tx, msg(1), msg(2), msg(3))
	})
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	if got := count(t, conn, "outbox"); got != 0 {
		t.Errorf("outbox has %d rows, want 0", got)
	}

	// The stream still carries the three inserts (and no delete: the publication publishes
	// inserts only).
	var inserts, deletes int
	err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE substr(data, 1, 1) = 'I'),
		count(*) FILTER (WHERE substr(data, 1, 1) = 'D')
		FROM pg_logical_slot_get_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', 'walbox')`,
		slot).Scan(&inserts, &deletes)
	if err != nil {
		t.Fatalf("read slot: %v", err)
	}
	if inserts != 3 || deletes != 0 {
		t.Errorf("stream has %d inserts and %d deletes, want 3 and 0", inserts, deletes)
	}
}

func TestWriteAddsTraceparentFromContext(t *testing.T) {
	conn, _ := newDB(t)
	ctx := outbox.WithTraceparent(context.Background(), testTraceparent)
	own := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	withOwn := msg(2)
	withOwn.Headers = map[string]any{"traceparent": own, "tenant": "acme"}
	withOther := msg(3)
	withOther.Headers = map[string]any{"tenant": "acme"}
	err := inTx(t, conn, func(tx pgx.Tx) error { return outbox.Write(ctx, tx, msg(1), withOwn, withOther) })
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	rows := readRows(t, conn, "outbox")
	want := []map[string]any{
		{"traceparent": testTraceparent},
		{"traceparent": own, "tenant": "acme"},
		{"traceparent": testTraceparent, "tenant": "acme"},
	}
	for i, r := range rows {
		if got, _ := json.Marshal(r.Headers); string(got) != mustJSON(want[i]) {
			t.Errorf("row %d: headers %s, want %s", i, got, mustJSON(want[i]))
		}
	}
	if _, ok := withOther.Headers["traceparent"]; ok {
		t.Error("Write modified the caller's Headers map")
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestWithTraceparentIgnoresInvalid(t *testing.T) {
	ctx := outbox.WithTraceparent(context.Background(), "00-00000000000000000000000000000000-00f067aa0ba902b7-01")
	if got := outbox.TraceparentFrom(ctx); got != "" {
		t.Errorf("TraceparentFrom = %q, want \"\"", got)
	}
	ctx = outbox.WithTraceparent(ctx, testTraceparent)
	if got := outbox.TraceparentFrom(ctx); got != testTraceparent {
		t.Errorf("TraceparentFrom = %q, want %q", got, testTraceparent)
	}
}

func TestValidTraceparent(t *testing.T) {
	for _, tc := range []struct {
		tp   string
		want bool
	}{
		{testTraceparent, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"", false},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},     // unknown version
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false},     // upper case
		{"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", false},      // short trace id
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},     // zero trace id
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},     // zero parent id
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", false},     // bad flags
		{"00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01", false},     // bad separator
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xx", false},  // trailing data
		{" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},    // leading space
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\x00", false}, // trailing NUL
	} {
		if got := outbox.ValidTraceparent(tc.tp); got != tc.want {
			t.Errorf("ValidTraceparent(%q) = %v, want %v", tc.tp, got, tc.want)
		}
	}
}

// validationCases break one rule each in the second message of a Write.
func validationCases() []struct {
	name   string
	field  string
	modify func(m *outbox.Message)
	opts   []outbox.WriterOption
} {
	return []struct {
		name   string
		field  string
		modify func(m *outbox.Message)
		opts   []outbox.WriterOption
	}{
		{"empty event type", "EventType", func(m *outbox.Message) { m.EventType = "" }, nil},
		{"event type longer than a routing key", "EventType", func(m *outbox.Message) { m.EventType = strings.Repeat("e", 256) }, nil},
		{"event type with NUL", "EventType", func(m *outbox.Message) { m.EventType = "a\x00b" }, nil},
		{"empty aggregate type", "AggregateType", func(m *outbox.Message) { m.AggregateType = "" }, nil},
		{"empty aggregate id", "AggregateID", func(m *outbox.Message) { m.AggregateID = "" }, nil},
		{"aggregate id not UTF-8", "AggregateID", func(m *outbox.Message) { m.AggregateID = "\xff" }, nil},
		{"empty payload", "Payload", func(m *outbox.Message) { m.Payload = nil }, nil},
		{"payload not JSON", "Payload", func(m *outbox.Message) { m.Payload = []byte(`{"n":`) }, nil},
		{"payload with NUL", "Payload", func(m *outbox.Message) { m.Payload = []byte(`{"a\\u0000": 1, "n": "x\u0000"}`) }, nil},
		{"header with NUL", "Headers", func(m *outbox.Message) { m.Headers = map[string]any{"h": "a\x00b"} }, nil},
		{"payload over the default limit", "Payload", func(m *outbox.Message) {
			m.Payload = []byte(`"` + strings.Repeat("x", outbox.MaxPayloadBytes) + `"`)
		}, nil},
		{"payload over a configured limit", "Payload", func(m *outbox.Message) { m.Payload = []byte(`"0123456789"`) },
			[]outbox.WriterOption{outbox.WithMaxPayloadBytes(10)}},
		{"empty header name", "Headers", func(m *outbox.Message) { m.Headers = map[string]any{"": "x"} }, nil},
		{"empty nested header name", "Headers", func(m *outbox.Message) {
			m.Headers = map[string]any{"a": []any{map[string]any{"": 1.0}}}
		}, nil},
		{"header name longer than AMQP allows", "Headers", func(m *outbox.Message) {
			m.Headers = map[string]any{strings.Repeat("h", 256): "x"}
		}, nil},
		{"reserved header", "Headers", func(m *outbox.Message) { m.Headers = map[string]any{"aggregate_id": "7"} }, nil},
		{"header with walbox's prefix", "Headers", func(m *outbox.Message) {
			m.Headers = map[string]any{"tenant": "acme", "x-walbox-attempts": int64(1)}
		}, nil},
		{"header with walbox's prefix in capitals", "Headers", func(m *outbox.Message) {
			m.Headers = map[string]any{"X-Walbox-Error": "forged"}
		}, nil},
		{"header value not JSON", "Headers", func(m *outbox.Message) { m.Headers = map[string]any{"f": func() {}} }, nil},
		{"headers too large", "Headers", func(m *outbox.Message) {
			m.Headers = map[string]any{"big": strings.Repeat("x", outbox.MaxHeaderBytes)}
		}, nil},
		{"invalid traceparent header", "Headers", func(m *outbox.Message) { m.Headers = map[string]any{"traceparent": "00-xyz"} }, nil},
		{"duplicate id", "ID", func(m *outbox.Message) { m.ID = uuid.MustParse("0190f5a2-7c3e-7def-8a1b-123456789abc") }, nil},
	}
}

func TestWriteValidationWritesNothing(t *testing.T) {
	conn, url := newDB(t)
	sqlDB := openSQL(t, url)
	ctx := context.Background()
	for _, tc := range validationCases() {
		first := msg(0)
		first.ID = uuid.MustParse("0190f5a2-7c3e-7def-8a1b-123456789abc") // for "duplicate id"
		second := msg(1)
		tc.modify(&second)
		w := outbox.NewWriter(outbox.DefaultTable, tc.opts...)
		check := func(t *testing.T, err error) {
			t.Helper()
			if !errors.Is(err, outbox.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
			var ve *outbox.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("got %T, want *ValidationError", err)
			}
			if ve.Index != 1 || ve.Field != tc.field || ve.Reason == "" {
				t.Errorf("got index %d field %q reason %q, want index 1 field %q and a reason", ve.Index, ve.Field, ve.Reason, tc.field)
			}
		}
		t.Run(tc.name+"/pgx", func(t *testing.T) {
			// The transaction stays usable: it commits, with nothing in the outbox.
			err := inTx(t, conn, func(tx pgx.Tx) error {
				check(t, w.Write(ctx, tx, first, second))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := count(t, conn, "outbox"); got != 0 {
				t.Errorf("outbox has %d rows, want 0", got)
			}
		})
		t.Run(tc.name+"/sql", func(t *testing.T) {
			tx, err := sqlDB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback() //nolint:errcheck // a no-op after Commit; after a failed check, frees the rows it wrote
			check(t, w.WriteSQL(ctx, tx, first, second))
			if err := tx.Commit(); err != nil {
				t.Fatalf("commit: %v", err)
			}
			if got := count(t, conn, "outbox"); got != 0 {
				t.Errorf("outbox has %d rows, want 0", got)
			}
		})
	}
}

func TestWriteAcceptsEscapedBackslashBeforeU0000(t *testing.T) {
	conn, _ := newDB(t)
	ctx := context.Background()
	m := msg(1)
	m.Payload = []byte(`{"path": "C:\\u0000"}`) // a backslash, then the text u0000: no NUL
	if err := inTx(t, conn, func(tx pgx.Tx) error { return outbox.Write(ctx, tx, m) }); err != nil {
		t.Fatalf("write: %v", err)
	}
	if got, want := readRows(t, conn, "outbox")[0].Payload["path"], `C:\u0000`; got != want {
		t.Errorf("payload path %q, want %q", got, want)
	}
}
