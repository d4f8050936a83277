package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/consumer/internal/handling"
	"github.com/walbox/walbox/wire"
)

// worker consumes one partition while this process holds its lease. It handles deliveries and
// the partition's held aggregates in one goroutine, so an aggregate's messages stay in order.
type worker struct {
	k         *keeper
	c         *Consumer
	partition int
	queue     string

	// ctx ends when the keeper tells the worker to stop.
	ctx    context.Context
	cancel context.CancelFunc
	// lease ends when the lease is lost or its time, less the margin, is up.
	lease     context.Context
	loseLease context.CancelFunc
	timer     *time.Timer
	// live ends with ctx or lease: pauses wait on it.
	live context.Context

	mu      sync.Mutex
	stopped bool
	// downSince is when the worker started or its last session ended; zero while one runs.
	downSince time.Time
	err       error // why run ended; read by the keeper after the exit
	backoffs  time.Duration
}

func newWorker(ctx context.Context, k *keeper, p int, until time.Time) *worker {
	w := &worker{k: k, c: k.c, partition: p, queue: k.c.cfg.partitionQueue(p), downSince: time.Now()}
	w.ctx, w.cancel = context.WithCancel(ctx)
	w.lease, w.loseLease = context.WithCancel(context.WithoutCancel(ctx))
	w.timer = time.AfterFunc(time.Until(until), w.loseLease)
	live, endLive := context.WithCancel(w.ctx)
	context.AfterFunc(w.lease, endLive)
	w.live = live
	return w
}

// extend lets the worker run until until, unless its lease already ended.
func (w *worker) extend(until time.Time) {
	if w.timer.Stop() {
		w.timer.Reset(time.Until(until))
	}
}

// lose ends the lease at once.
func (w *worker) lose() {
	w.timer.Stop()
	w.loseLease()
}

// stop tells the worker to finish its message in hand and end.
func (w *worker) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.cancel()
}

func (w *worker) stopping() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopped
}

// setUp records whether a session runs now.
func (w *worker) setUp(up bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case up:
		w.downSince = time.Time{}
	case w.downSince.IsZero():
		w.downSince = time.Now()
	}
}

// unreachable says the worker has had no session for longer than d.
func (w *worker) unreachable(d time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.downSince.IsZero() && time.Since(w.downSince) > d
}

// run consumes the partition, reconnecting with backoff, until told to stop or the lease ends.
// It then frees the lease, so that another process may take it over at once.
func (w *worker) run() {
	defer func() {
		w.release()
		w.lose()
		w.cancel()
		w.k.exits <- w
	}()
	// hctx is the in-flight message's: it ends with the lease, or ShutdownTimeout after stop.
	hctx, cancel := context.WithCancel(w.lease)
	defer cancel()
	defer context.AfterFunc(w.ctx, func() {
		t := time.NewTimer(w.c.cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-hctx.Done():
		}
	})()
	backoff := w.c.cfg.ReconnectBackoff
	for {
		consumed, err := w.session(hctx)
		w.setUp(false)
		if w.ctx.Err() != nil || w.lease.Err() != nil {
			return
		}
		if Fatal(err) {
			w.err = err
			return
		}
		w.c.report(fmt.Errorf("partition %d: %w", w.partition, err))
		if consumed {
			backoff = w.c.cfg.ReconnectBackoff
		}
		if !handling.Sleep(w.live, backoff) {
			return
		}
		backoff = min(2*backoff, w.c.cfg.ReconnectBackoffMax)
	}
}

// release frees the lease if this process still holds it.
func (w *worker) release() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_, err := w.c.pool.Exec(ctx, w.c.psql.release, w.c.cfg.ConsumerName, w.partition, w.k.member)
	if err != nil {
		w.c.report(fmt.Errorf("partition %d: free lease: %w", w.partition, err))
	}
}

// session runs one broker connection for the partition.
func (w *worker) session(hctx context.Context) (consumed bool, err error) {
	var nc netConn
	defer context.AfterFunc(hctx, nc.close)()
	stopSetup := context.AfterFunc(w.ctx, nc.close)
	defer stopSetup()
	name := fmt.Sprintf("%s p%d", w.c.cfg.ConsumerName, w.partition)
	conn, err := amqp.DialConfig(w.c.cfg.AMQPURL, amqp.Config{
		Dial:       nc.dialer(w.ctx),
		Properties: amqp.Table{"connection_name": name},
	})
	if err != nil {
		return false, fmt.Errorf("dial broker: %w", err)
	}
	defer func() {
		_ = conn.CloseDeadline(time.Now().Add(closeTimeout))
		nc.close()
	}()
	ch, deliveries, closed, err := w.setup(conn, name)
	if err != nil {
		return false, err
	}
	if !stopSetup() {
		return false, w.ctx.Err()
	}
	w.setUp(true)
	return true, w.consume(hctx, ch, deliveries, closed)
}

// setup opens the channel in confirm mode and consumes the partition's queue. It declares the
// topology again first: a broker may have lost it.
func (w *worker) setup(conn *amqp.Connection, tag string) (*amqp.Channel, <-chan amqp.Delivery, <-chan *amqp.Error, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open channel: %w", err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Confirm(false); err != nil {
		return nil, nil, nil, fmt.Errorf("confirm mode: %w", err)
	}
	if err := w.c.declarePartitions(ch); err != nil {
		return nil, nil, nil, err
	}
	if err := ch.Qos(w.c.cfg.Prefetch, 0, false); err != nil {
		return nil, nil, nil, fmt.Errorf("set prefetch: %w", err)
	}
	deliveries, err := ch.Consume(w.queue, tag, false, false, false, false, nil)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("consume %s: %w", w.queue, err)
	}
	return ch, deliveries, closed, nil
}

// consume handles deliveries and, between them, the partition's due holds.
func (w *worker) consume(hctx context.Context, ch *amqp.Channel, deliveries <-chan amqp.Delivery, closed <-chan *amqp.Error) error {
	poll := time.NewTimer(0)
	defer poll.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return nil
		case <-w.lease.Done():
			return errLeaseLost
		default:
		}
		select {
		case <-w.ctx.Done():
			return nil
		case <-w.lease.Done():
			return errLeaseLost
		case d, ok := <-deliveries:
			if !ok {
				return channelClosed(closed)
			}
			if err := w.handle(hctx, ch, &d); err != nil {
				return err
			}
		case <-poll.C:
			if err := w.drain(hctx); err != nil {
				return w.dbFailed(err)
			}
			poll.Reset(w.c.cfg.holdPoll())
		}
	}
}

// handle handles, holds or skips one delivery, then acknowledges it. After a database error it
// pauses and ends the session instead. Closing the channel requeues the delivery and those after
// it, in their order. A single requeue would not keep that order.
func (w *worker) handle(ctx context.Context, ch *amqp.Channel, d *amqp.Delivery) error {
	if wire.IsCanary(d.Type, d.Headers) {
		return ackCanary(d)
	}
	if d.MessageId == "" {
		return w.c.deadLetter(ctx, ch, d, attemptsBefore(d.Headers), ErrMissingMessageID)
	}
	del := newDelivery(d)
	m := heldOf(d, w.partition)
	handled, handlerErr, err := w.process(ctx, del, m)
	if err == nil && handlerErr != nil {
		w.c.cfg.Metrics.Failed(w.c.cfg.ConsumerName, del)
		err = w.hold(ctx, m, del.Attempt, handlerErr)
	}
	if err != nil {
		w.c.cfg.Metrics.Failed(w.c.cfg.ConsumerName, del)
		return w.dbFailed(&MessageError{MessageID: del.MessageID, Attempt: del.Attempt, Err: err})
	}
	if handled {
		w.c.cfg.Metrics.Handled(w.c.cfg.ConsumerName, del)
	}
	w.backoffs = 0
	if err := d.Ack(false); err != nil {
		return fmt.Errorf("ack message %s: %w", del.MessageID, err)
	}
	return nil
}

// dbFailed reports a database error and pauses before the session ends with it. A lost lease
// or an error no retry cures ends it at once.
func (w *worker) dbFailed(err error) error {
	if errors.Is(err, errLeaseLost) || Fatal(err) {
		return err
	}
	w.backoffs = min(max(2*w.backoffs, w.c.cfg.ReconnectBackoff), w.c.cfg.ReconnectBackoffMax)
	handling.Sleep(w.live, w.backoffs)
	return err
}

// holdPoll is how often a worker looks for held aggregates due for another attempt.
func (c *Config) holdPoll() time.Duration {
	return min(max(c.RetryBackoff, 50*time.Millisecond), c.beatInterval())
}
