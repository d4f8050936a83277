package outbox_test

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/walbox/walbox/outbox"
)

func openSQL(tb testing.TB, url string) *sql.DB {
	tb.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

func TestWriteSQL(t *testing.T) {
	conn, url := newDB(t)
	db := openSQL(t, url)
	ctx := outbox.WithTraceparent(context.Background(), testTraceparent)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	withTime := msg(2)
	withTime.CreatedAt = withTime.CreatedAt.AddDate(2020, 0, 0)
	if err := outbox.WriteSQL(ctx, tx, msg(1), withTime); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	rows := readRows(t, conn, "outbox")
	if got, want := len(rows), 2; got != want {
		t.Fatalf("got %d rows, want %d", got, want)
	}
	for i, r := range rows {
		if r.AggregateID != msg(i+1).AggregateID || r.Payload["n"] != float64(i+1) {
			t.Errorf("row %d: got %+v", i, r)
		}
		if got := r.Headers["traceparent"]; got != testTraceparent {
			t.Errorf("row %d: traceparent %v, want %s", i, got, testTraceparent)
		}
	}
	if !rows[1].CreatedAt.Equal(withTime.CreatedAt) {
		t.Errorf("row 1: created_at %v, want %v", rows[1].CreatedAt, withTime.CreatedAt)
	}
}

func TestWriteSQLRollbackAndDeleteAfterInsert(t *testing.T) {
	conn, url := newDB(t)
	db := openSQL(t, url)
	ctx := context.Background()
	w := outbox.NewWriter(outbox.DefaultTable, outbox.DeleteAfterInsert())

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteSQL(ctx, tx, msg(1)); err != nil {
		t.Fatalf("write: %v", err)
	}
	var inTx int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM outbox").Scan(&inTx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if inTx != 0 || count(t, conn, "outbox") != 0 {
		t.Errorf("outbox has rows (%d inside the transaction), want none", inTx)
	}

	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.WriteSQL(ctx, tx, msg(1)); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if got := count(t, conn, "outbox"); got != 0 {
		t.Errorf("outbox has %d rows after rollback, want 0", got)
	}
}
