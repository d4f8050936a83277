package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/outbox"
)

// pruneLockTimeout bounds how long a batch waits for a lock (behind a schema change, say) before
// prune gives up, so that it never stands in a lock queue for long.
const pruneLockTimeout = 5 * time.Second

// pruneJob deletes outbox rows older than a cutoff, a batch per transaction.
type pruneJob struct {
	Table     outbox.Table
	CreatedAt string        // the timestamp column, outbox.ColCreatedAt by default
	OlderThan time.Duration // rows created before now() - OlderThan go
	BatchSize int           // rows per DELETE
	Pause     time.Duration // sleep between batches
	DryRun    bool          // count only
}

// pruneResult is what a prune did.
type pruneResult struct {
	Cutoff  time.Time // the server's now() - OlderThan, fixed at the start
	Rows    int64     // deleted, or with DryRun that would be
	Batches int       // transactions that deleted rows
}

func runPrune(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon()
	olderThan := c.s.add("older-than", "WALBOX_PRUNE_OLDER_THAN", "",
		"delete rows created longer ago than this, e.g. 168h or 7d (required)")
	batch := c.s.add("batch-size", "WALBOX_PRUNE_BATCH_SIZE", "1000", "rows deleted per transaction")
	pause := c.s.add("pause", "WALBOX_PRUNE_PAUSE", "0s", "sleep between batches, to spread the load")
	dryRun := c.s.addBool("dry-run", "WALBOX_PRUNE_DRY_RUN", "false", "count the rows that would be deleted, delete nothing")
	fs := newFlagSet("prune", "Delete outbox rows older than --older-than in short transactions of --batch-size rows; "+
		"safe while walbox runs (the publication does not publish deletes)", stderr)
	if err := c.parse(fs, args); err != nil {
		return err
	}
	job := pruneJob{CreatedAt: outbox.ColCreatedAt}
	dsn, err := c.dsn()
	if err != nil {
		return err
	}
	if job.Table, err = c.outboxTable(); err != nil {
		return err
	}
	if job.OlderThan, err = parseAge(olderThan); err != nil {
		return err
	}
	if job.BatchSize, err = batch.int(); err != nil {
		return err
	}
	if job.Pause, err = time.ParseDuration(pause.value); err != nil || job.Pause < 0 {
		return badSetting(pause, "%q is not a duration like 100ms (0 for none)", pause.value)
	}
	if job.DryRun, err = dryRun.bool(); err != nil {
		return err
	}
	fail := func(err error) error { return errors.New(redact.Text(err.Error(), c.secrets()...)) }

	ctx, stop := signalContext(ctx, func() {})
	defer stop()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fail(fmt.Errorf("connect to postgres: %w", err))
	}
	defer conn.Close(context.Background())
	res, err := job.run(ctx, conn)
	if job.DryRun && err == nil {
		fmt.Fprintf(stdout, "would delete %d rows created before %s from %s (dry run: nothing deleted)\n",
			res.Rows, res.Cutoff.UTC().Format(time.RFC3339), job.Table)
		return nil
	}
	if !res.Cutoff.IsZero() {
		fmt.Fprintf(stdout, "deleted %d rows created before %s from %s in %d batches\n",
			res.Rows, res.Cutoff.UTC().Format(time.RFC3339), job.Table, res.Batches)
	}
	if err != nil {
		return fail(err)
	}
	return nil
}

// parseAge parses --older-than: a Go duration (36h, 90m) or whole days (7d).
func parseAge(st *setting) (time.Duration, error) {
	v, err := st.required()
	if err != nil {
		return 0, err
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, perr := strconv.Atoi(days)
		d, err = time.Duration(n)*24*time.Hour, perr
	} else {
		d, err = time.ParseDuration(v)
	}
	if err != nil || d <= 0 {
		return 0, badSetting(st, "%q is not a positive duration like 168h or 7d", v)
	}
	return d, nil
}

// run fixes the cutoff by the server's clock, then deletes (or counts) the rows older than it.
// Each batch is a transaction of its own: row locks on old rows only, held for one short DELETE.
func (j pruneJob) run(ctx context.Context, conn *pgx.Conn) (pruneResult, error) {
	var res pruneResult
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET lock_timeout = %d", pruneLockTimeout.Milliseconds())); err != nil {
		return res, fmt.Errorf("set lock_timeout: %w", err)
	}
	err := conn.QueryRow(ctx, "SELECT now() - $1::bigint * interval '1 microsecond'", j.OlderThan.Microseconds()).Scan(&res.Cutoff)
	if err != nil {
		return res, fmt.Errorf("read the server's clock: %w", err)
	}
	col := pgx.Identifier{j.CreatedAt}.Sanitize()
	if j.DryRun {
		err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE %s < $1", j.Table.Quoted(), col), res.Cutoff).Scan(&res.Rows)
		if err != nil {
			return res, fmt.Errorf("count rows of %s: %w", j.Table, err)
		}
		return res, nil
	}
	// ctid = ANY(ARRAY(...)) is a TID scan. The outer condition keeps it exact on a partitioned
	// table, whose partitions repeat ctids.
	del := fmt.Sprintf(`DELETE FROM %[1]s WHERE %[2]s < $1 AND ctid = ANY(ARRAY(
		SELECT ctid FROM %[1]s WHERE %[2]s < $1 LIMIT $2))`, j.Table.Quoted(), col)
	for {
		tag, err := conn.Exec(ctx, del, res.Cutoff, j.BatchSize)
		if err != nil {
			return res, fmt.Errorf("delete from %s after %d rows: %w", j.Table, res.Rows, err)
		}
		if n := tag.RowsAffected(); n > 0 {
			res.Rows += n
			res.Batches++
		}
		if tag.RowsAffected() < int64(j.BatchSize) {
			return res, nil
		}
		if err := sleep(ctx, j.Pause); err != nil {
			return res, fmt.Errorf("interrupted after %d rows: %w", res.Rows, err)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
