package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/consumer/internal/handling"
)

// heldMessage is a delivery as a hold keeps it in the database.
type heldMessage struct {
	seq         int64
	aggregateID string
	partition   int
	id          string
	typ         string
	routingKey  string
	exchange    string
	contentType string
	headers     []byte // JSON
	body        []byte
	sentAt      *time.Time
}

func heldOf(d *amqp.Delivery, partition int) heldMessage {
	del := newDelivery(d)
	exchange, _ := d.Headers[HeaderExchange].(string)
	if _, ok := d.Headers[HeaderRoutingKey]; !ok {
		exchange = d.Exchange
	}
	m := heldMessage{
		aggregateID: aggregateOf(d.Headers),
		partition:   partition,
		id:          d.MessageId,
		typ:         d.Type,
		routingKey:  del.RoutingKey,
		exchange:    exchange,
		contentType: d.ContentType,
		headers:     headersJSON(d.Headers),
		body:        d.Body,
	}
	if m.body == nil {
		m.body = []byte{}
	}
	if !d.Timestamp.IsZero() {
		m.sentAt = &d.Timestamp
	}
	return m
}

// delivery is m as the handler sees it, on attempt.
func (m *heldMessage) delivery(attempt int) Delivery {
	d := Delivery{
		MessageID:  m.id,
		Type:       m.typ,
		RoutingKey: m.routingKey,
		Body:       m.body,
		Headers:    headersOf(m.headers),
		Attempt:    attempt,
	}
	d.CommitTime = CommitTime(d.Headers)
	if m.sentAt != nil {
		d.Timestamp = *m.sentAt
	}
	return d
}

// aggregateOf reads the aggregate id header. Messages without one share the hold of "".
func aggregateOf(h amqp.Table) string {
	switch v := h[HeaderAggregateID].(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// fence checks, in tx, that this process still holds the partition's lease. It locks the lease:
// no takeover commits before tx ends. It reports whether aggregateID is held.
func (w *worker) fence(ctx context.Context, tx pgx.Tx, aggregateID string) (held bool, err error) {
	var leased bool
	err = tx.QueryRow(ctx, w.c.psql.fence, w.c.cfg.ConsumerName, w.partition, w.k.member, aggregateID).Scan(&leased, &held)
	if err != nil {
		return false, handling.ClassifyDB(fmt.Errorf("check lease: %w", err))
	}
	if !leased {
		return false, errLeaseLost
	}
	return held, nil
}

// process handles a delivery in a transaction behind the fence. A delivery of a held aggregate
// joins the hold. A message recorded as processed is a duplicate and skipped. The results are
// as Consumer.process's.
func (w *worker) process(ctx context.Context, d Delivery, m heldMessage) (handled bool, handlerErr, err error) {
	tx, release, err := handling.Begin(ctx, w.c.pool)
	if err != nil {
		return false, nil, handling.ClassifyDB(fmt.Errorf("begin: %w", err))
	}
	defer release()
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	held, err := w.fence(ctx, tx, m.aggregateID)
	if err != nil {
		return false, nil, err
	}
	if held {
		if err := w.insertHeld(ctx, tx, m); err != nil {
			return false, nil, err
		}
		return false, nil, commit(ctx, tx)
	}
	tag, err := tx.Exec(ctx, w.c.insertProcessed, d.MessageID, w.c.cfg.ConsumerName)
	if err != nil {
		return false, nil, handling.ClassifyDB(fmt.Errorf("record processed message: %w", err))
	}
	if tag.RowsAffected() == 0 {
		return false, nil, nil // handled before
	}
	if err := handling.Call(ctx, w.c.handler, tx, d); err != nil {
		return false, err, nil
	}
	handlerErr, err = handling.Commit(ctx, tx)
	return handlerErr == nil && err == nil, handlerErr, err
}

func (w *worker) insertHeld(ctx context.Context, tx pgx.Tx, m heldMessage) error {
	_, err := tx.Exec(ctx, w.c.psql.holdMessage, w.c.cfg.ConsumerName, m.aggregateID, m.partition, m.id, m.typ,
		m.routingKey, m.exchange, m.contentType, m.headers, m.body, m.sentAt)
	if err != nil {
		return handling.ClassifyDB(fmt.Errorf("hold message: %w", err))
	}
	return nil
}

func commit(ctx context.Context, tx pgx.Tx) error {
	if err := tx.Commit(ctx); err != nil {
		return handling.ClassifyDB(fmt.Errorf("commit: %w", err))
	}
	return nil
}

// hold starts a hold of m's aggregate after m failed attempt. The message heads the hold. Later
// messages of its aggregate wait behind it. It is retried from the database, as often as
// MaxAttempts allows. Then it waits for Release.
func (w *worker) hold(ctx context.Context, m heldMessage, attempt int, handlerErr error) error {
	tx, err := w.c.pool.Begin(ctx)
	if err != nil {
		return handling.ClassifyDB(fmt.Errorf("begin: %w", err))
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := w.fence(ctx, tx, m.aggregateID); err != nil {
		return err
	}
	failed := attempt >= w.c.cfg.MaxAttempts
	_, err = tx.Exec(ctx, w.c.psql.hold, w.c.cfg.ConsumerName, m.aggregateID, m.partition, attempt,
		w.c.cfg.retryDelay(attempt), failed, handling.ErrorHeader(handlerErr))
	if err != nil {
		return handling.ClassifyDB(fmt.Errorf("hold aggregate: %w", err))
	}
	if err := w.insertHeld(ctx, tx, m); err != nil {
		return err
	}
	if err := commit(ctx, tx); err != nil {
		return err
	}
	w.c.report(&MessageError{MessageID: m.id, Attempt: attempt, Retry: !failed, Held: failed, Err: handlerErr})
	return nil
}

// drain handles the partition's held aggregates that are due: released, or waiting for a retry.
func (w *worker) drain(ctx context.Context) error {
	rows, err := w.c.pool.Query(ctx, w.c.psql.dueHolds, w.c.cfg.ConsumerName, w.partition)
	if err != nil {
		return handling.ClassifyDB(fmt.Errorf("read holds: %w", err))
	}
	due, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return handling.ClassifyDB(fmt.Errorf("read holds: %w", err))
	}
	for _, a := range due {
		for w.ctx.Err() == nil { // told to stop: the next holder goes on
			done, err := w.drainOne(ctx, a)
			if err != nil {
				return err
			}
			if done {
				break
			}
		}
	}
	return nil
}

// drainOne handles the first held message of aggregateID, or discards it if Skip said so. The
// result done says the hold is gone or waits again.
func (w *worker) drainOne(ctx context.Context, aggregateID string) (done bool, err error) {
	tx, release, err := handling.Begin(ctx, w.c.pool)
	if err != nil {
		return false, handling.ClassifyDB(fmt.Errorf("begin: %w", err))
	}
	defer release()        // a no-op after the release below
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := w.fence(ctx, tx, aggregateID); err != nil {
		return false, err
	}
	h, err := w.takeHead(ctx, tx, aggregateID)
	if err != nil || h.waits {
		return h.waits, err
	}
	tag, err := tx.Exec(ctx, w.c.insertProcessed, h.m.id, w.c.cfg.ConsumerName)
	if err != nil {
		return false, handling.ClassifyDB(fmt.Errorf("record processed message: %w", err))
	}
	// A skipped message is recorded as processed too: a copy of it that comes later is skipped.
	if tag.RowsAffected() == 0 || h.skip != nil && *h.skip == h.m.id {
		return h.ended, commit(ctx, tx) // handled before it was held, or discarded unhandled
	}
	d := h.m.delivery(h.attempts + 1)
	handlerErr := handling.Call(ctx, w.c.handler, tx, d)
	if handlerErr == nil {
		handlerErr, err = handling.Commit(ctx, tx)
	}
	if err != nil || handlerErr != nil {
		w.c.cfg.Metrics.Failed(w.c.cfg.ConsumerName, d)
	}
	if err != nil {
		return false, err
	}
	if handlerErr == nil {
		w.c.cfg.Metrics.Handled(w.c.cfg.ConsumerName, d)
		return h.ended, nil
	}
	// The connection goes back first: failed takes one, and the pool may have no other.
	_ = tx.Rollback(ctx)
	release()
	return true, w.failed(ctx, aggregateID, h.m, h.attempts+1, handlerErr)
}

// headOfHold is a hold's first message, taken off the hold in the transaction that handles it.
type headOfHold struct {
	m        heldMessage
	attempts int     // failed attempts at m so far
	skip     *string // the message Skip discards
	// waits says there is nothing to handle: the hold is gone, or its message failed for good.
	waits bool
	// ended says m was the last held message: the hold ends with it.
	ended bool
}

// takeHead locks aggregateID's hold and takes its first message off it, in tx. A hold without
// messages is removed; it waits then.
func (w *worker) takeHead(ctx context.Context, tx pgx.Tx, aggregateID string) (headOfHold, error) {
	name := w.c.cfg.ConsumerName
	var h headOfHold
	var failed bool
	err := tx.QueryRow(ctx, w.c.psql.lockHold, name, aggregateID).Scan(&h.attempts, &failed, &h.skip)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && failed {
		return headOfHold{waits: true}, nil
	}
	if err != nil {
		return h, handling.ClassifyDB(fmt.Errorf("lock hold: %w", err))
	}
	if h.m, err = w.head(ctx, tx, aggregateID); errors.Is(err, pgx.ErrNoRows) {
		if _, err := tx.Exec(ctx, w.c.psql.deleteHold, name, aggregateID); err != nil {
			return h, handling.ClassifyDB(fmt.Errorf("end hold: %w", err))
		}
		return headOfHold{waits: true}, commit(ctx, tx)
	}
	if err != nil {
		return h, err
	}
	if _, err := tx.Exec(ctx, w.c.psql.deleteHeld, name, h.m.seq); err != nil {
		return h, handling.ClassifyDB(fmt.Errorf("take held message: %w", err))
	}
	if _, err := tx.Exec(ctx, w.c.psql.handledHead, name, aggregateID); err != nil {
		return h, handling.ClassifyDB(fmt.Errorf("update hold: %w", err))
	}
	tag, err := tx.Exec(ctx, w.c.psql.endIfEmpty, name, aggregateID)
	if err != nil {
		return h, handling.ClassifyDB(fmt.Errorf("end hold: %w", err))
	}
	h.ended = tag.RowsAffected() > 0
	return h, nil
}

// head reads the first held message of aggregateID.
func (w *worker) head(ctx context.Context, tx pgx.Tx, aggregateID string) (heldMessage, error) {
	m := heldMessage{aggregateID: aggregateID, partition: w.partition}
	err := tx.QueryRow(ctx, w.c.psql.headMessage, w.c.cfg.ConsumerName, aggregateID).Scan(&m.seq, &m.id, &m.typ,
		&m.routingKey, &m.exchange, &m.contentType, &m.headers, &m.body, &m.sentAt)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		err = handling.ClassifyDB(fmt.Errorf("read held message: %w", err))
	}
	return m, err
}

// failed records a failed attempt of m, a hold's first message. Another follows after the retry
// delay; after MaxAttempts, none until Release. A handler that committed its transaction itself
// took m off the hold. Then m is handled, and the next message keeps its attempts.
func (w *worker) failed(ctx context.Context, aggregateID string, m heldMessage, attempt int, handlerErr error) error {
	tx, err := w.c.pool.Begin(ctx)
	if err != nil {
		return handling.ClassifyDB(fmt.Errorf("begin: %w", err))
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := w.fence(ctx, tx, aggregateID); err != nil {
		return err
	}
	failed := attempt >= w.c.cfg.MaxAttempts
	tag, err := tx.Exec(ctx, w.c.psql.failHead, w.c.cfg.ConsumerName, aggregateID, attempt, failed,
		handling.ErrorHeader(handlerErr), w.c.cfg.retryDelay(attempt), m.seq)
	if err != nil {
		return handling.ClassifyDB(fmt.Errorf("update hold: %w", err))
	}
	if tag.RowsAffected() == 0 {
		return nil // m left the hold in the handler's own commit, or the hold ended with it
	}
	if err := commit(ctx, tx); err != nil {
		return err
	}
	w.c.report(&MessageError{MessageID: m.id, Attempt: attempt, Retry: !failed, Held: failed, Err: handlerErr})
	return nil
}
