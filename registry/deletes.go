package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/ownertrust"
	"github.com/walbox/walbox/wire"
)

// Deletes is what the server's statistics count of the rows deleted from an outbox table. Beside it
// is what walbox explains of them for one slot:
//   - rows walbox prune deleted: all below every relaying slot's horizon, so never rows of a gap;
//   - deletes walbox recover --accept-loss accepted for that slot.
//
// The statistics count deletes since they began. They restart after a crash or pg_stat_reset, and
// the explained count then restarts too. A delete reaches them within seconds, once the deleting
// session reports it. They do not count TRUNCATE, nor deletes made on another server before a
// standby was promoted.
type Deletes struct {
	Table wire.Table
	// Began is when the statistics began counting; zero if the server does not say.
	Began time.Time
	// Seen is the rows deleted from the table (its partitions) since the statistics began.
	Seen int64
	// Explained is how many of those walbox prune deleted or walbox recover accepted for the slot.
	Explained int64
}

// Unexplained is the rows deleted from the table that walbox cannot explain: rows of a gap may
// be among them.
func (d Deletes) Unexplained() int64 { return max(0, d.Seen-d.Explained) }

// deletesTable names the ledger of deletes in the registry's schema.
func deletesTable(schema string) string { return pgx.Identifier{schema, "walbox_deletes"}.Sanitize() }

// statsSQL reads the rows deleted from the table $1 (a quoted name), summed over its partitions. It
// reads when the statistics began counting them too (statsSince).
const statsSQL = `SELECT coalesce((SELECT pg_catalog.sum(pg_catalog.pg_stat_get_tuples_deleted(r.relid)) FROM (
			SELECT pg_catalog.to_regclass($1) AS relid
			UNION SELECT p.relid FROM pg_catalog.pg_partition_tree(pg_catalog.to_regclass($1)) AS p WHERE p.isleaf) AS r), 0)::pg_catalog.int8,
	` + statsSince

// statsSince is the SQL for when the server's statistics last began counting. That is the later of
// the database's reset (pg_stat_reset, a table's reset) and the archiver's. A crash drops every
// table's counts and leaves the database's reset time as it was (none, often). But it resets the
// archiver's to the end of crash recovery. The archiver's also says when a new server, a standby
// promoted later, first started.
const statsSince = `GREATEST(
		(SELECT d.stats_reset FROM pg_catalog.pg_stat_database AS d WHERE d.datname = pg_catalog.current_database()),
		(SELECT a.stats_reset FROM pg_catalog.pg_stat_archiver AS a))`

// ReadDeletes reads the server's statistics of the rows deleted from the table. It reads what
// walbox recorded of them for slot in walbox_deletes, beside walbox_slots in schema. Where
// walbox_deletes does not exist, walbox recorded nothing.
func ReadDeletes(ctx context.Context, db Querier, schema string, t wire.Table, slot string) (Deletes, error) {
	c, err := readCount(ctx, db, schema, t, "")
	if c.reset != nil {
		c.Began = *c.reset
	}
	d := c.Deletes
	d.Explained = c.pruned + c.accepted[slot]
	return d, err
}

// count is what the statistics and walbox_deletes hold of a table. It holds the statistics' reset
// time, the rows prune deleted, and the deletes accepted per slot.
type count struct {
	Deletes
	reset    *time.Time
	pruned   int64
	accepted map[string]int64
}

// readCount reads the statistics and the table's row of walbox_deletes, with lock (" FOR
// UPDATE" or "").
func readCount(ctx context.Context, db Querier, schema string, t wire.Table, lock string) (count, error) {
	c := count{Deletes: Deletes{Table: t}}
	if err := db.QueryRow(ctx, statsSQL, t.Quoted()).Scan(&c.Seen, &c.reset); err != nil {
		return c, fmt.Errorf("read the statistics of %s: %w", t, err)
	}
	exists, err := DeletesExist(ctx, db, schema)
	if err != nil || !exists {
		return c, err
	}
	var (
		reset           *time.Time
		seen, explained int64
		accepted        map[string]int64
	)
	err = db.QueryRow(ctx, "SELECT stats_reset, seen, explained, accepted FROM "+deletesTable(schema)+" WHERE table_name = $1"+lock, t.String()).
		Scan(&reset, &seen, &explained, &accepted)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read %s.walbox_deletes: %w", schema, err)
	}
	// Statistics that went back, or were reset, began again: what was explained is not in them.
	if sameTime(c.reset, reset) && c.Seen >= seen {
		c.pruned, c.accepted = explained, accepted
	}
	return c, nil
}

// DeletesExist reports whether schema has walbox_deletes (walbox migrate creates it beside
// walbox_slots).
func DeletesExist(ctx context.Context, db Querier, schema string) (bool, error) {
	var ok bool
	if err := db.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NOT NULL", deletesTable(schema)).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up %s.walbox_deletes: %w", schema, err)
	}
	return ok, nil
}

// CountPruned records that walbox prune deleted n rows from the table. Call it in the transaction
// that deleted them (db), so that no delete of prune's goes unrecorded.
func CountPruned(ctx context.Context, db Querier, schema string, t wire.Table, n int64) error {
	return record(ctx, db, schema, t, func(c *count) { c.pruned += n })
}

// AcceptDeletes records every delete the statistics count now as explained for slot. The command
// walbox recover --accept-loss accepted the loss of whatever rows they took from its gap. Other
// slots relaying the table still count them: their gaps may hold other rows among them.
func AcceptDeletes(ctx context.Context, db Querier, schema string, t wire.Table, slot string) error {
	return record(ctx, db, schema, t, func(c *count) {
		c.accepted[slot] = max(c.accepted[slot], c.Seen-c.pruned)
	})
}

// record changes, by change, what walbox_deletes holds of the table, read together with the
// statistics now.
func record(ctx context.Context, db Querier, schema string, t wire.Table, change func(c *count)) error {
	// A trigger of an untrusted owner would run with this role's rights. An owner is untrusted when
	// it may not run code as this role anyway. A superuser running prune on a registry the
	// application's role migrated is one case.
	if err := ownertrust.Check(ctx, db, deletesTable(schema), "prune or recover"); err != nil {
		return err
	}
	c, err := readCount(ctx, db, schema, t, " FOR UPDATE")
	if err != nil {
		return err
	}
	if c.accepted == nil {
		c.accepted = map[string]int64{}
	}
	change(&c)
	_, err = db.Exec(ctx, "INSERT INTO "+deletesTable(schema)+` AS t (table_name, stats_reset, seen, explained, accepted)
		VALUES ($1, $2, $3, $4, $5::pg_catalog.jsonb)
		ON CONFLICT (table_name) DO UPDATE SET stats_reset = excluded.stats_reset, seen = excluded.seen,
			explained = excluded.explained, accepted = excluded.accepted, updated_at = pg_catalog.now()`,
		t.String(), c.reset, c.Seen, c.pruned, c.accepted)
	if err != nil {
		return fmt.Errorf("record the deletes from %s in %s.walbox_deletes: %w", t, schema, err)
	}
	return nil
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}
