package prune_test

import (
	"testing"
	"time"

	"github.com/walbox/walbox/internal/prune"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/outbox"
)

func TestParseAge(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{{"36h", 36 * time.Hour}, {"90m", 90 * time.Minute}, {"7d", 7 * 24 * time.Hour}} {
		if got, err := prune.ParseAge(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseAge(%q) = %v, %v, want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "0s", "-1h", "0d", "xd", "7", "d"} {
		if _, err := prune.ParseAge(bad); err == nil {
			t.Errorf("ParseAge(%q): nil error", bad)
		}
	}
}

// Only rows older than the age go, a batch per transaction; a dry run counts them and deletes
// nothing.
func TestRunDeletesOnlyOldRowsInBatches(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db, conn := pg.MigratedDatabase(t, migrations.Config{})
	ctx := t.Context()
	pg.Exec(t, db, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
		SELECT 'order', g::text, 'order.created', '{}', now() - interval '2 days' FROM generate_series(1, 5) g`)
	pg.Exec(t, db, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', g::text, 'order.created', '{}' FROM generate_series(6, 7) g`)
	count := func() (n int) {
		t.Helper()
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	job := prune.Job{Table: outbox.DefaultTable, OlderThan: 24 * time.Hour, BatchSize: 2, DryRun: true}
	res, err := job.Run(ctx, conn)
	if err != nil || res.Rows != 5 || res.Batches != 0 || count() != 7 {
		t.Fatalf("dry run: %+v, %v, %d rows left; want 5 counted, none deleted", res, err, count())
	}
	if age := time.Since(res.Cutoff); age < 23*time.Hour || age > 25*time.Hour {
		t.Errorf("cutoff %v is %v ago, want a day", res.Cutoff, age)
	}
	job.DryRun = false
	res, err = job.Run(ctx, conn)
	if err != nil || res.Rows != 5 || res.Batches != 3 || count() != 2 {
		t.Fatalf("prune: %+v, %v, %d rows left; want 5 deleted in 3 batches, 2 left", res, err, count())
	}
	if _, err := (prune.Job{Table: outbox.DefaultTable, OlderThan: time.Hour}).Run(ctx, conn); err == nil {
		t.Error("a batch size of 0: nil error")
	}
}
