package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/publisher"
)

// pollSQL claims a batch of unpublished rows and marks them published in the same statement;
// the transaction commits only after the broker confirmed every message of the batch, so a crash
// before that publishes them again (at least once, like walbox).
const pollSQL = `UPDATE outbox_polling SET published_at = now()
WHERE id IN (SELECT id FROM outbox_polling WHERE published_at IS NULL ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING seq, id, aggregate_type, aggregate_id, event_type, payload, headers, created_at`

// poller is the polling relay, written as its proponents describe it: claim a batch, publish it
// with pipelined confirms, commit; poll again at once after a full batch, else after the interval.
type poller struct {
	db       *pgx.Conn
	pub      *pipeline
	exchange string
	batch    int
	interval time.Duration
	// measureFrom is the first payload seq whose confirm latency is recorded, from created_at
	// (the start of the producer's single-row transaction, a fraction of a millisecond before
	// its commit).
	measureFrom int
}

// runPoll relays until ctx ends, finishing the batch at hand first.
func runPoll(ctx context.Context, spec childSpec) error {
	db, err := pgx.Connect(ctx, spec.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer db.Close(context.Background())
	pub, err := dialPipeline(spec.AMQPURL, spec.Batch, true)
	if err != nil {
		return err
	}
	defer pub.conn.Close()
	p := &poller{db: db, pub: pub, exchange: spec.Exchange, batch: spec.Batch, interval: spec.Interval,
		measureFrom: spec.MeasureFrom}
	for ctx.Err() == nil {
		n, err := p.once(context.WithoutCancel(ctx))
		if err != nil {
			return err
		}
		if n < p.batch {
			_ = sleepUntil(ctx, time.Now().Add(p.interval))
		}
	}
	return writeResult(spec.ResultFile, p.pub.latencies, nil)
}

// polled is a claimed row.
type polled struct {
	seq int64
	msg outbox.Message
}

// once relays one batch and returns its size.
func (p *poller) once(ctx context.Context) (int, error) {
	tx, err := p.db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op after Commit
	rows, err := tx.Query(ctx, pollSQL, p.batch)
	if err != nil {
		return 0, fmt.Errorf("claim batch: %w", err)
	}
	batch, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (polled, error) {
		var r polled
		m := &r.msg
		err := row.Scan(&r.seq, &m.ID, &m.AggregateType, &m.AggregateID, &m.EventType, &m.Payload, &m.Headers, &m.CreatedAt)
		return r, err
	})
	if err != nil {
		return 0, fmt.Errorf("claim batch: %w", err)
	}
	// RETURNING does not keep the subquery's order.
	slices.SortFunc(batch, func(a, b polled) int { return int(a.seq - b.seq) })
	for i := range batch {
		m := &batch[i].msg
		var start int64
		if seq, ok := field(m.Payload, keySeq); ok && seq >= int64(p.measureFrom) {
			start = m.CreatedAt.UnixNano()
		}
		if err := p.pub.publish(ctx, p.exchange, m.EventType, publisher.Publishing(m, "walbox"), start); err != nil {
			return 0, err
		}
	}
	if err := p.pub.waitAll(ctx); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return len(batch), nil
}
