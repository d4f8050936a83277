package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walbox/walbox/outbox"
)

// emitted is the content of a message the emit function wrote.
type emitted struct {
	V             int            `json:"v"`
	ID            uuid.UUID      `json:"id"`
	AggregateType string         `json:"aggregate_type"`
	AggregateID   string         `json:"aggregate_id"`
	EventType     string         `json:"event_type"`
	Payload       map[string]any `json:"payload"`
	Headers       map[string]any `json:"headers"`
	CreatedAt     time.Time      `json:"created_at"`
}

// messageSlot creates a test_decoding slot on conn's database, which shows logical decoding
// messages as text. It is not temporary: an error in the session would drop a temporary one. The
// database's cleanup drops it.
func messageSlot(tb testing.TB, conn *pgx.Conn) string {
	tb.Helper()
	slot := strings.ReplaceAll("emit_"+uuid.NewString()[:8], "-", "")
	if _, err := conn.Exec(context.Background(), "SELECT pg_create_logical_replication_slot($1, 'test_decoding')", slot); err != nil {
		tb.Fatalf("create slot: %v", err)
	}
	return slot
}

// readMessages returns the content of every committed transactional message with the prefix
// walbox since the last call, in commit order.
func readMessages(tb testing.TB, conn *pgx.Conn, slot string) []emitted {
	tb.Helper()
	rows, err := conn.Query(context.Background(), "SELECT data FROM pg_logical_slot_get_changes($1, NULL, NULL)", slot)
	if err != nil {
		tb.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatal(err)
	}
	var out []emitted
	for _, l := range lines {
		if !strings.HasPrefix(l, "message: transactional: 1 prefix: walbox, ") {
			continue
		}
		_, content, _ := strings.Cut(l, " content:")
		var e emitted
		if err := json.Unmarshal([]byte(content), &e); err != nil {
			tb.Fatalf("message content %q: %v", content, err)
		}
		out = append(out, e)
	}
	return out
}

func TestEmitWritesMessagesInOrderWithoutRows(t *testing.T) {
	conn, _ := newDB(t)
	slot := messageSlot(t, conn)
	ctx := outbox.WithTraceparent(context.Background(), testTraceparent)

	msgs := make([]outbox.Message, 50)
	for i := range msgs {
		msgs[i] = msg(i)
	}
	given := uuid.MustParse("0190f5a2-7c3e-7def-8a1b-123456789abc")
	at := time.Date(2026, 11, 22, 7, 15, 24, 123456000, time.UTC)
	msgs[7].ID, msgs[7].CreatedAt = given, at
	msgs[9].Headers = map[string]any{"tenant": "acme"}
	if err := inTx(t, conn, func(tx pgx.Tx) error { return outbox.Emit(ctx, tx, msgs...) }); err != nil {
		t.Fatal(err)
	}
	// A rolled-back transaction leaves no message.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.Emit(ctx, tx, msg(100)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	got := readMessages(t, conn, slot)
	if len(got) != len(msgs) {
		t.Fatalf("got %d messages, want %d", len(got), len(msgs))
	}
	for i, e := range got {
		if e.V != 1 || e.Payload["n"] != float64(i) || e.EventType != "order.created" || e.AggregateID != fmt.Sprint(i) {
			t.Fatalf("message %d: %+v, want version 1 and the fields of message %d", i, e, i)
		}
		if e.Headers["traceparent"] != testTraceparent {
			t.Errorf("message %d: headers %v, want the traceparent from the context", i, e.Headers)
		}
		switch {
		case i == 7 && (e.ID != given || !e.CreatedAt.Equal(at)):
			t.Errorf("message 7: id %v at %v, want the given %v at %v", e.ID, e.CreatedAt, given, at)
		case i != 7 && (e.ID.Version() != 7 || e.CreatedAt.IsZero()):
			t.Errorf("message %d: id %v (version %d) at %v, want a UUIDv7 and the transaction's time", i, e.ID, e.ID.Version(), e.CreatedAt)
		}
	}
	if got[9].Headers["tenant"] != "acme" {
		t.Errorf("message 9: headers %v, want tenant acme kept", got[9].Headers)
	}
	if n := count(t, conn, "outbox"); n != 0 {
		t.Errorf("outbox has %d rows, want none", n)
	}
}

func TestEmitSQL(t *testing.T) {
	conn, url := newDB(t)
	slot := messageSlot(t, conn)
	db := openSQL(t, url)
	ctx := outbox.WithTraceparent(context.Background(), testTraceparent)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	second := msg(2)
	second.CreatedAt = at
	if err := outbox.EmitSQL(ctx, tx, msg(1), second); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	got := readMessages(t, conn, slot)
	if len(got) != 2 || got[0].Payload["n"] != 1.0 || got[1].Payload["n"] != 2.0 || !got[1].CreatedAt.Equal(at) {
		t.Fatalf("got %+v, want messages 1 and 2, the second at %v", got, at)
	}
	if got[0].Headers["traceparent"] != testTraceparent {
		t.Errorf("headers %v, want the traceparent", got[0].Headers)
	}
}

func TestEmitValidationEmitsNothing(t *testing.T) {
	conn, _ := newDB(t)
	slot := messageSlot(t, conn)
	ctx := context.Background()
	for _, tc := range validationCases() {
		first := msg(0)
		first.ID = uuid.MustParse("0190f5a2-7c3e-7def-8a1b-123456789abc")
		second := msg(1)
		tc.modify(&second)
		w := outbox.NewWriter(outbox.DefaultTable, append(tc.opts, outbox.EmitMessages())...)
		err := inTx(t, conn, func(tx pgx.Tx) error { return w.Write(ctx, tx, first, second) })
		var ve *outbox.ValidationError
		if !errors.As(err, &ve) || ve.Index != 1 || ve.Field != tc.field {
			t.Errorf("%s: got %v, want a validation error of message 1's %s", tc.name, err, tc.field)
		}
	}
	if got := readMessages(t, conn, slot); len(got) != 0 {
		t.Errorf("got %d messages, want none", len(got))
	}
}

// The function's own checks are the table's constraints, and the relay's rules a row would be
// parked for; the call fails instead.
func TestEmitFunctionChecksItsArguments(t *testing.T) {
	conn, _ := newDB(t)
	slot := messageSlot(t, conn)
	ctx := context.Background()
	for _, tc := range []struct {
		name, args, code string
	}{
		{"null event type", `'order', '1', NULL, '{}'`, "23502"},
		{"empty event type", `'order', '1', '', '{}'`, "23514"},
		{"event type longer than a routing key", `'order', '1', repeat('e', 256), '{}'`, "23514"},
		{"null payload", `'order', '1', 'order.created', NULL`, "23502"},
		{"null aggregate type", `NULL, '1', 'order.created', '{}'`, "23502"},
		{"null aggregate id", `'order', NULL, 'order.created', '{}'`, "23502"},
		{"null headers", `'order', '1', 'order.created', '{}', NULL`, "23502"},
		{"headers not an object", `'order', '1', 'order.created', '{}', '[1]'`, "23514"},
		{"header with walbox's prefix", `'order', '1', 'order.created', '{}', '{"a": 1, "x-walbox-error": "forged"}'`, "23514"},
		{"header with walbox's prefix in capitals", `'order', '1', 'order.created', '{}', '{"X-WALBOX-attempts": 1}'`, "23514"},
	} {
		_, err := conn.Exec(ctx, "SELECT walbox_emit("+tc.args+")")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != tc.code {
			t.Errorf("%s: got %v, want SQLSTATE %s", tc.name, err, tc.code)
		}
	}
	// Outside a transaction block the call is a transaction of its own.
	var id uuid.UUID
	if err := conn.QueryRow(ctx, `SELECT walbox_emit('order', '1', 'order.created', '{"n": 1}')`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	got := readMessages(t, conn, slot)
	if len(got) != 1 || got[0].ID != id || id.Version() != 4 || got[0].Headers == nil || len(got[0].Headers) != 0 {
		t.Fatalf("got %+v, want one message with the returned random id %v and empty headers", got, id)
	}
}
