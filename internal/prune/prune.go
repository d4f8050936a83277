package prune

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/internal/ownertrust"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/shard"
)

// LockTimeout bounds how long a batch waits for a lock (behind a schema change, say) before prune
// gives up. So prune never stands in a lock queue for long.
const LockTimeout = 5 * time.Second

// Defaults of walbox prune: short transactions, one after the other.
const (
	DefaultBatchSize = 1000
	DefaultPause     = time.Duration(0)
)

// Job deletes outbox rows older than a cutoff, a batch per transaction.
type Job struct {
	Table     outbox.Table
	CreatedAt string        // the timestamp column (default outbox.ColCreatedAt)
	OlderThan time.Duration // rows created before now() - OlderThan go
	BatchSize int           // rows per DELETE (DefaultBatchSize for walbox prune)
	Pause     time.Duration // sleep between batches (DefaultPause for walbox prune)
	DryRun    bool          // count only
	// Base names the slots and publications that relay the table. Every set of shards named after
	// it counts, the single slot included. Records that cover the table count too (ReadHorizon).
	Base shard.Set
}

// Result is what a prune did.
type Result struct {
	Cutoff  time.Time // the server's now() - OlderThan, fixed at the start
	Rows    int64     // deleted, or with DryRun that would be
	Batches int       // transactions that deleted rows
	// Kept counts the rows older than the cutoff that prune keeps back: not below Horizon.
	Kept    int64
	Horizon Horizon
}

// ParseAge parses an age: a Go duration (36h, 90m) or whole days (7d), positive.
func ParseAge(v string) (time.Duration, error) {
	var (
		d   time.Duration
		err error
	)
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, perr := strconv.Atoi(days)
		d, err = time.Duration(n)*24*time.Hour, perr
	} else {
		d, err = time.ParseDuration(v)
	}
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration like 168h or 7d", v)
	}
	return d, nil
}

// Run fixes the cutoff by the server's clock. It reads the transaction horizon every slot relaying
// the table confirmed (ReadHorizon). Then it deletes (or counts) the rows older than the cutoff
// whose inserting transaction is also older than the horizon. Rows a slot may not have confirmed
// stay, whatever their age: walbox recover republishes from them. Records only move forward: walbox
// recover resets one to a later horizon. So the horizon read once holds for the whole run. Each
// batch is a transaction of its own: row locks on old rows only, held for one short DELETE.
func (j Job) Run(ctx context.Context, conn *pgx.Conn) (Result, error) {
	var res Result
	if j.BatchSize < 1 || j.OlderThan <= 0 {
		return res, fmt.Errorf("prune: batch size %d and age %v must be positive", j.BatchSize, j.OlderThan)
	}
	if j.CreatedAt == "" {
		j.CreatedAt = outbox.ColCreatedAt
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET lock_timeout = %d", LockTimeout.Milliseconds())); err != nil {
		return res, fmt.Errorf("set lock_timeout: %w", err)
	}
	err := conn.QueryRow(ctx, "SELECT pg_catalog.now() - $1::pg_catalog.int8 * interval '1 microsecond'", j.OlderThan.Microseconds()).Scan(&res.Cutoff)
	if err != nil {
		return res, fmt.Errorf("read the server's clock: %w", err)
	}
	if res.Horizon, err = ReadHorizon(ctx, conn, j.Table, j.Base); err != nil {
		return res, err
	}
	old := fmt.Sprintf("%s < $1", pgx.Identifier{j.CreatedAt}.Sanitize())
	below := belowCondition(res.Horizon.Xmin)
	var count int64
	err = conn.QueryRow(ctx, fmt.Sprintf("SELECT pg_catalog.count(*) FILTER (WHERE %s), pg_catalog.count(*) FROM %s WHERE %s",
		below, j.Table.Quoted(), old), res.Cutoff).Scan(&res.Rows, &count)
	if err != nil {
		return res, fmt.Errorf("count rows of %s: %w", j.Table, err)
	}
	res.Kept = count - res.Rows
	if j.DryRun || res.Horizon.Xmin == 0 {
		return res, nil
	}
	if ok, err := registry.DeletesExist(ctx, conn, j.Table.Schema); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("%s.walbox_deletes does not exist: prune records there what it deletes, so that walbox recover "+
				"can tell its deletes from others. Run walbox migrate first", j.Table.Schema)
		}
		return res, err
	}
	// A DELETE trigger or rule of an untrusted owner would run with this role's rights. An owner is
	// untrusted when it may not run code as this role anyway. The application's role is one, with
	// prune run by a superuser.
	if err := ownertrust.Check(ctx, conn, j.Table.Quoted(), "prune"); err != nil {
		return res, err
	}
	res.Rows = 0
	// ctid = ANY(ARRAY(...)) is a TID scan. The outer condition keeps it exact on a partitioned
	// table, whose partitions repeat ctids.
	del := fmt.Sprintf(`DELETE FROM %[1]s WHERE %[2]s AND %[3]s AND ctid = ANY(ARRAY(
		SELECT ctid FROM %[1]s WHERE %[2]s AND %[3]s LIMIT $2))`, j.Table.Quoted(), old, below)
	for {
		n, err := j.batch(ctx, conn, del, res.Cutoff)
		if err != nil {
			return res, fmt.Errorf("delete from %s after %d rows: %w", j.Table, res.Rows, err)
		}
		if n > 0 {
			res.Rows += n
			res.Batches++
		}
		if n < int64(j.BatchSize) {
			return res, nil
		}
		if err := sleep(ctx, j.Pause); err != nil {
			return res, fmt.Errorf("interrupted after %d rows: %w", res.Rows, err)
		}
	}
}

// batch deletes one batch and records in walbox_deletes, in the same transaction, how many rows
// it deleted.
func (j Job) batch(ctx context.Context, conn *pgx.Conn, del string, cutoff time.Time) (int64, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	tag, err := tx.Exec(ctx, del, cutoff, j.BatchSize)
	if err != nil {
		return 0, err
	}
	n := tag.RowsAffected()
	if n > 0 {
		if err := registry.CountPruned(ctx, tx, j.Table.Schema, j.Table, n); err != nil {
			return 0, err
		}
	}
	killpoint.Hit("prune.deleted")
	return n, tx.Commit(ctx)
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
