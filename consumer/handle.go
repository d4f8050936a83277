package consumer

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/consumer/internal/handling"
	"github.com/walbox/walbox/wire"
)

// handle processes one delivery and settles it. It acks a handled message or a duplicate. It
// republishes, then acks, a retry or dead letter. After a database error it pauses and tries
// again, holding d. A return would count towards a quorum queue's delivery limit. The context ctx
// is Run's, hctx the in-flight message's. An error means the channel is unusable, or a fatal
// database error. The session then ends, and the broker requeues what was not acknowledged.
func (c *Consumer) handle(ctx, hctx context.Context, ch *amqp.Channel, d *amqp.Delivery) error {
	if wire.IsCanary(d.Type, d.Headers) {
		return ackCanary(d) // walbox's own, for its canary queue: a binding of # gets it too
	}
	if d.MessageId == "" {
		return c.deadLetter(hctx, ch, d, attemptsBefore(d.Headers), ErrMissingMessageID)
	}
	del := newDelivery(d)
	handled, handlerErr, err := c.process(hctx, del)
	for err != nil {
		c.cfg.Metrics.Failed(c.cfg.ConsumerName, del)
		if werr := c.waitDB(ctx, &MessageError{MessageID: del.MessageID, Attempt: del.Attempt, Err: err}); werr != nil || ctx.Err() != nil {
			return werr // d stays unacknowledged; the session's end returns it
		}
		if ch.IsClosed() {
			return fmt.Errorf("message %s: channel closed while the database was unavailable", del.MessageID)
		}
		handled, handlerErr, err = c.process(hctx, del)
	}
	if handlerErr != nil {
		c.cfg.Metrics.Failed(c.cfg.ConsumerName, del)
		c.dbBackoff = 0
		return c.retry(hctx, ch, d, del.Attempt, handlerErr)
	}
	c.dbBackoff = 0
	if handled {
		c.cfg.Metrics.Handled(c.cfg.ConsumerName, del)
	}
	if err := d.Ack(false); err != nil {
		return fmt.Errorf("ack message %s: %w", del.MessageID, err)
	}
	return nil
}

// ackCanary acknowledges a message of walbox's canary without handling it.
func ackCanary(d *amqp.Delivery) error {
	if err := d.Ack(false); err != nil {
		return fmt.Errorf("ack canary message %s: %w", d.MessageId, err)
	}
	return nil
}

// process runs the handler for d in a transaction that first records d as processed. A message
// already recorded is a duplicate and skipped; handled is false then. It returns the handler's
// error as handlerErr. It returns err when the consumer's own statements failed. Then whether the
// handler ran is unknown, and the message is delivered again. The processed row keeps it from
// being handled twice.
func (c *Consumer) process(ctx context.Context, d Delivery) (handled bool, handlerErr, err error) {
	tx, release, err := handling.Begin(ctx, c.pool)
	if err != nil {
		return false, nil, handling.ClassifyDB(fmt.Errorf("begin: %w", err))
	}
	defer release()
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	tag, err := tx.Exec(ctx, c.insertProcessed, d.MessageID, c.cfg.ConsumerName)
	if err != nil {
		return false, nil, handling.ClassifyDB(fmt.Errorf("record processed message: %w", err))
	}
	if tag.RowsAffected() == 0 {
		return false, nil, nil // handled before
	}
	if err := handling.Call(ctx, c.handler, tx, d); err != nil {
		return false, err, nil
	}
	handlerErr, err = handling.Commit(ctx, tx)
	return handlerErr == nil && err == nil, handlerErr, err
}

// waitDB reports a database error and pauses before another try, so that an unavailable
// database is not hammered. The pause grows while such errors repeat. A fatal error comes back.
func (c *Consumer) waitDB(ctx context.Context, merr *MessageError) error {
	if Fatal(merr.Err) {
		return merr
	}
	c.report(merr)
	c.dbBackoff = min(max(2*c.dbBackoff, c.cfg.ReconnectBackoff), c.cfg.ReconnectBackoffMax)
	handling.Sleep(ctx, c.dbBackoff)
	return nil
}

// retry schedules another attempt through the retry queue for this attempt's delay. After the
// last attempt it dead-letters d instead. It acknowledges d once the broker confirmed the copy.
func (c *Consumer) retry(ctx context.Context, ch *amqp.Channel, d *amqp.Delivery, attempt int, handlerErr error) error {
	if attempt >= c.cfg.MaxAttempts {
		return c.deadLetter(ctx, ch, d, attempt, handlerErr)
	}
	p := republish(d, amqp.Table{
		HeaderAttempts: int64(attempt),
		HeaderError:    handling.ErrorHeader(handlerErr),
	})
	if err := publish(ctx, ch, c.cfg.retryQueue(c.cfg.retryDelay(attempt)), p); err != nil {
		return fmt.Errorf("schedule retry of message %s: %w", d.MessageId, err)
	}
	c.report(&MessageError{MessageID: d.MessageId, Attempt: attempt, Retry: true, Err: handlerErr})
	if err := d.Ack(false); err != nil {
		return fmt.Errorf("ack message %s: %w", d.MessageId, err)
	}
	return nil
}

// deadLetter moves d to the dead-letter queue with the reason in its headers.
func (c *Consumer) deadLetter(ctx context.Context, ch *amqp.Channel, d *amqp.Delivery, attempts int, reason error) error {
	p := republish(d, amqp.Table{
		HeaderAttempts: int64(attempts),
		HeaderError:    handling.ErrorHeader(reason),
		HeaderConsumer: c.cfg.ConsumerName,
	})
	if err := publish(ctx, ch, c.cfg.DeadLetterQueue, p); err != nil {
		return fmt.Errorf("dead-letter message %q: %w", d.MessageId, err)
	}
	c.report(&MessageError{MessageID: d.MessageId, Attempt: attempts, DeadLettered: true, Err: reason})
	if err := d.Ack(false); err != nil {
		return fmt.Errorf("ack message %q: %w", d.MessageId, err)
	}
	return nil
}

// publish sends p to queue through the default exchange and waits for the broker's confirm.
func publish(ctx context.Context, ch *amqp.Channel, queue string, p amqp.Publishing) error {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, p)
	if err != nil {
		return fmt.Errorf("publish to %s: %w", queue, err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("confirm from %s: %w", queue, err)
	}
	if !acked {
		return fmt.Errorf("publish to %s: nacked by the broker", queue)
	}
	return nil
}
