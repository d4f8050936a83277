package streamconsumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/consumer/internal/handling"
	"github.com/walbox/walbox/internal/streamconn"
	"github.com/walbox/walbox/wire"
)

// Consumer reads a RabbitMQ stream and runs a handler for each message, exactly once. The
// handler's transaction also stores the offset of the next message. So a message is handled
// again only if its transaction did not commit. It needs no row per message. Messages are
// handled one at a time, in stream order. A failing message is retried in place, the messages
// behind it waiting, then dead-lettered.
type Consumer struct {
	pool    *pgxpool.Pool
	cfg     Config
	handler consumer.Handler
	// table is OffsetTable, quoted.
	table string
}

// New returns a Consumer that handles the messages of cfg.Stream with h. It fills in the zero
// fields of cfg with their defaults, then checks it (Config.Validate).
func New(pool *pgxpool.Pool, cfg Config, h consumer.Handler) (*Consumer, error) {
	if pool == nil || h == nil {
		return nil, errors.New("new stream consumer: nil pool or handler")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t, _ := wire.ParseTable(cfg.OffsetTable)
	return &Consumer{pool: pool, cfg: cfg, handler: h, table: t.Quoted()}, nil
}

// createOffsetTable creates the offset table unless it exists. Consumers starting at once take
// turns: concurrent CREATE TABLE IF NOT EXISTS can fail on a duplicate catalog row.
func (c *Consumer) createOffsetTable(ctx context.Context) error {
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext($1))", "walbox offset table "+c.table); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+c.table+
			" (consumer pg_catalog.text NOT NULL, stream pg_catalog.text NOT NULL, next_offset pg_catalog.int8 NOT NULL,"+
			" PRIMARY KEY (consumer, stream))")
		return err
	})
}

// Run reads and handles messages until ctx ends. It then returns nil once the message in hand
// is handled or abandoned. An abandoned message's transaction rolled back: it is handled again
// next time. Run reconnects after connection and database errors. It returns early only on an
// error Fatal reports. Either the offset table cannot be created or read, or a dead letter
// would be dropped by the broker. Or the stored offset lies outside the stream: an
// *OffsetError, also given to OnError. Config.OffsetReset may accept a reset instead.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.createOffsetTable(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return handling.ClassifyDB(fmt.Errorf("create offset table: %w", err))
	}
	for {
		err := c.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		c.cfg.OnError(err)
		if Fatal(err) {
			return err
		}
		if !handling.Sleep(ctx, c.cfg.ReconnectBackoff) {
			return nil
		}
	}
}

// deadLetterOffsetTimeout bounds the offset move after a confirmed dead letter. It runs even at
// shutdown, so it needs a bound of its own.
const deadLetterOffsetTimeout = 30 * time.Second

// record is one message read from the stream, with its offset.
type record struct {
	offset int64
	msg    *amqp.Message
}

// session reads from the stored offset on one connection until an error or the end of ctx.
func (c *Consumer) session(ctx context.Context) error {
	next, stored, err := c.storedOffset(ctx)
	if err != nil {
		return err
	}
	env, err := stream.NewEnvironment(streamconn.Options().SetUris(c.cfg.URIs))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer env.Close()
	if stored {
		if next, err = c.startOffset(ctx, env, next); err != nil {
			return err
		}
	}
	records := make(chan record, 64)
	closed := make(chan struct{})
	sc, err := env.NewConsumer(c.cfg.Stream, func(cc stream.ConsumerContext, m *amqp.Message) {
		select {
		case records <- record{cc.Consumer.GetOffset(), m}:
		case <-closed:
		}
	}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.Offset(next)).SetClientProvidedName(c.cfg.ConsumerName))
	if err != nil {
		return fmt.Errorf("consume %s: %w", c.cfg.Stream, err)
	}
	defer close(closed)
	defer sc.Close()
	dead := newDeadLetters(env, &c.cfg)
	defer dead.close()
	ended := sc.NotifyClose()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-ended:
			return fmt.Errorf("stream consumer closed: %v", ev.Reason)
		case r := <-records:
			if r.offset < next {
				continue // delivered again with its chunk
			}
			if r.offset > next && stored {
				if err := c.gap(ctx, next, r.offset); err != nil {
					return err
				}
			}
			stored = true
			if err := c.handle(ctx, dead, r); err != nil {
				return err
			}
			next = r.offset + 1
		}
	}
}

// storedOffset returns the offset of the next message to handle, and whether it was stored. A
// new consumer starts at 0, the stream's first message.
func (c *Consumer) storedOffset(ctx context.Context) (next int64, stored bool, err error) {
	err = c.pool.QueryRow(ctx, "SELECT next_offset FROM "+c.table+" WHERE consumer = $1 AND stream = $2",
		c.cfg.ConsumerName, c.cfg.Stream).Scan(&next)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, handling.ClassifyDB(fmt.Errorf("read offset: %w", err))
	}
	return next, true, nil
}

// handle handles r, retrying a failing handler and dead-lettering the message after the last
// attempt. An error is a database or broker error: the session starts again from the stored
// offset.
func (c *Consumer) handle(ctx context.Context, dead *deadLetters, r record) error {
	d := streamDelivery(r.msg)
	if wire.IsCanary(d.Type, d.Headers) {
		_, _, err := c.process(ctx, r.offset, d, nil) // walbox's canary: only the offset moves
		return err
	}
	var handlerErr error
	for d.Attempt = 1; d.Attempt <= c.cfg.MaxAttempts; d.Attempt++ {
		if d.Attempt > 1 && !handling.Sleep(ctx, c.cfg.retryDelay(d.Attempt-1)) {
			return ctx.Err()
		}
		if d.MessageID == "" {
			handlerErr = consumer.ErrMissingMessageID
			break
		}
		handled, herr, err := c.process(ctx, r.offset, d, c.handler)
		if (err != nil || herr != nil) && ctx.Err() != nil {
			return ctx.Err() // abandoned at shutdown, not failed: handled again next time
		}
		handlerErr = herr
		switch {
		case err != nil || handlerErr != nil:
			c.cfg.Metrics.Failed(c.cfg.ConsumerName, d)
		case handled:
			c.cfg.Metrics.Handled(c.cfg.ConsumerName, d)
		}
		if err != nil || handlerErr == nil {
			return err
		}
		c.cfg.OnError(&consumer.MessageError{MessageID: d.MessageID, Attempt: d.Attempt, Err: handlerErr})
	}
	if err := dead.publish(r, min(d.Attempt, c.cfg.MaxAttempts), handlerErr); err != nil {
		return err
	}
	// The dead letter is stored: the offset moves past it even at shutdown.
	// Otherwise the next run handles a message the consumer gave up on.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deadLetterOffsetTimeout)
	defer cancel()
	_, _, err := c.process(mctx, r.offset, d, nil) // only the offset moves
	return err
}

// process runs h (if any) in a transaction that stores offset+1 as the next offset. It does so
// only if the stored offset is not past it. So a message another instance of the consumer
// handled is skipped. A stored offset below it is one the session checked (startOffset, and
// the gap check in session). The result handlerErr is the handler's error, after a rollback.
// It is also a transaction the handler ended or left failed. The result err is a database error.
// The result handled says that h ran and its transaction committed.
func (c *Consumer) process(ctx context.Context, offset int64, d consumer.Delivery,
	h func(context.Context, pgx.Tx, consumer.Delivery) error) (handled bool, handlerErr, err error) {
	tx, release, err := handling.Begin(ctx, c.pool)
	if err != nil {
		return false, nil, handling.ClassifyDB(fmt.Errorf("begin: %w", err))
	}
	defer release()
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	var stored int64
	err = tx.QueryRow(ctx, "INSERT INTO "+c.table+" AS o (consumer, stream, next_offset) VALUES ($1, $2, $3)"+
		" ON CONFLICT (consumer, stream) DO UPDATE SET next_offset = o.next_offset RETURNING next_offset",
		c.cfg.ConsumerName, c.cfg.Stream, offset).Scan(&stored)
	if err != nil {
		return false, nil, handling.ClassifyDB(fmt.Errorf("lock offset: %w", err))
	}
	if stored > offset {
		return false, nil, nil // handled by another instance of this consumer, or an earlier attempt
	}
	// The offset moves before the handler runs, as the queue consumer's processed row goes in
	// first. A handler that ends tx itself then gets a retry, not a failed offset update. And
	// a retry after its own commit finds the message handled.
	if _, err := tx.Exec(ctx, "UPDATE "+c.table+" SET next_offset = $3 WHERE consumer = $1 AND stream = $2",
		c.cfg.ConsumerName, c.cfg.Stream, offset+1); err != nil {
		return false, nil, handling.ClassifyDB(fmt.Errorf("store offset: %w", err))
	}
	if h != nil {
		if err := handling.Call(ctx, h, tx, d); err != nil {
			return false, err, nil
		}
	}
	handlerErr, err = handling.Commit(ctx, tx)
	return h != nil && handlerErr == nil && err == nil, handlerErr, err
}

// streamDelivery is the handler's view of a stream message. The application properties are
// the headers. The property event_type is also Type and RoutingKey.
func streamDelivery(m *amqp.Message) consumer.Delivery {
	d := consumer.Delivery{Headers: map[string]any{}}
	for k, v := range m.ApplicationProperties {
		d.Headers[k] = v
	}
	if p := m.Properties; p != nil {
		if p.MessageID != nil {
			d.MessageID = fmt.Sprint(p.MessageID)
		}
		d.Timestamp = p.CreationTime
	}
	d.CommitTime = consumer.CommitTime(d.Headers)
	d.Type, _ = d.Headers["event_type"].(string)
	d.RoutingKey = d.Type
	d.Body = []byte(strings.Join(dataSections(m), ""))
	return d
}

func dataSections(m *amqp.Message) []string {
	out := make([]string, len(m.Data))
	for i, b := range m.Data {
		out[i] = string(b)
	}
	return out
}
