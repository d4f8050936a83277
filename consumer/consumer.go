package consumer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/consumer/internal/handling"
	"github.com/walbox/walbox/wire"
)

const (
	// dialTimeout bounds the TCP connect, then the TLS and AMQP handshakes.
	dialTimeout = 30 * time.Second
	// closeTimeout bounds the connection.close handshake.
	closeTimeout = 5 * time.Second
	// publishTimeout bounds a retry or dead-letter publish and its confirm.
	publishTimeout = 30 * time.Second
)

// Consumer consumes one queue and hands each message to its Handler exactly once per message id.
type Consumer struct {
	pool    *pgxpool.Pool
	cfg     Config
	handler Handler

	insertProcessed string
	psql            partitionSQL
	// limitless holds the quorum queues found existing without x-delivery-limit.
	limitless sync.Map
	// warnedLimit holds the queues ErrNoDeliveryLimit was reported for.
	warnedLimit sync.Map
	// dbBackoff is the pause after a database error. It grows while such errors repeat.
	dbBackoff time.Duration
}

// New returns a Consumer of cfg.Queue that runs h in transactions on pool. It fills in the
// defaults of cfg, then validates it. New connects to nothing: Run does.
func New(pool *pgxpool.Pool, cfg Config, h Handler) (*Consumer, error) {
	if pool == nil {
		return nil, errors.New("new consumer: nil pool")
	}
	if h == nil {
		return nil, errors.New("new consumer: nil handler")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("consumer config: %w", err)
	}
	table, err := wire.ParseTable(cfg.ProcessedTable)
	if err != nil {
		return nil, fmt.Errorf("consumer config: processed table: %w", err)
	}
	return &Consumer{
		pool:    pool,
		cfg:     cfg,
		handler: h,
		insertProcessed: "INSERT INTO " + table.Quoted() + " (message_id, consumer, processed_at)" +
			" VALUES ($1, $2, pg_catalog.now()) ON CONFLICT DO NOTHING",
		psql: newPartitionSQL(table.Schema),
	}, nil
}

// errShutdownTimeout is returned by Run when the in-flight handler outlived ShutdownTimeout.
var errShutdownTimeout = errors.New("shutdown timeout: in-flight message abandoned, it will be redelivered")

// Run consumes until ctx ends, reconnecting with backoff whenever the broker connection is lost.
// When ctx ends it stops taking deliveries and lets the in-flight handler finish. It waits up to
// ShutdownTimeout, commits and acknowledges that message, and returns nil. It returns early only
// with an error that retrying cannot cure (see Fatal). Recovered errors go to Config.OnError.
func (c *Consumer) Run(ctx context.Context) error {
	if c.cfg.Partitions > 0 {
		return c.runPartitions(ctx)
	}
	// hctx carries the in-flight message: it outlives ctx by up to ShutdownTimeout.
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(c.cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-hctx.Done():
		}
	})
	defer stop()

	backoff := c.cfg.ReconnectBackoff
	for {
		consumed, err := c.session(ctx, hctx)
		switch {
		case errors.Is(err, errShutdownTimeout):
			return err
		case ctx.Err() != nil:
			return nil
		case Fatal(err):
			return err
		}
		c.report(err)
		if consumed {
			backoff = c.cfg.ReconnectBackoff
		}
		if !handling.Sleep(ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, c.cfg.ReconnectBackoffMax)
	}
}

// session runs one broker connection: dial, declare, consume until the connection fails or ctx
// ends. The result consumed reports whether it got as far as consuming.
func (c *Consumer) session(ctx, hctx context.Context) (consumed bool, err error) {
	var nc netConn
	// A handler outliving ShutdownTimeout, or ctx ending during setup, cuts the connection.
	defer context.AfterFunc(hctx, nc.close)()
	stopSetup := context.AfterFunc(ctx, nc.close)
	defer stopSetup()

	conn, err := amqp.DialConfig(c.cfg.AMQPURL, amqp.Config{
		Dial:       nc.dialer(ctx),
		Properties: amqp.Table{"connection_name": c.cfg.ConsumerName},
	})
	if err != nil {
		return false, fmt.Errorf("dial broker: %w", err)
	}
	defer func() {
		_ = conn.CloseDeadline(time.Now().Add(closeTimeout))
		nc.close()
	}()
	ch, deliveries, closed, err := c.setup(conn)
	if err != nil {
		return false, err
	}
	if !stopSetup() {
		return false, ctx.Err()
	}
	return true, c.consume(ctx, hctx, ch, deliveries, closed)
}

// consume handles deliveries one at a time until ctx ends or the channel fails.
func (c *Consumer) consume(ctx, hctx context.Context, ch *amqp.Channel, deliveries <-chan amqp.Delivery, closed <-chan *amqp.Error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		default:
		}
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return channelClosed(closed)
			}
			err := c.handle(ctx, hctx, ch, &d)
			if hctx.Err() != nil {
				return errShutdownTimeout
			}
			if err != nil {
				return err
			}
		}
	}
}

// channelClosed returns why the channel closed, as far as the broker said.
func channelClosed(closed <-chan *amqp.Error) error {
	select {
	case e, ok := <-closed:
		if ok && e != nil {
			return fmt.Errorf("channel closed: %w", e)
		}
	default:
	}
	return errors.New("channel closed")
}

func (c *Consumer) report(err error) {
	if err != nil && c.cfg.OnError != nil {
		c.cfg.OnError(err)
	}
}

// netConn keeps the session's TCP connection so that it can be cut. Contexts do not stop
// amqp091's Close, nor a publish blocked by a broker alarm.
type netConn struct {
	mu     sync.Mutex
	conn   net.Conn
	closed bool
}

func (n *netConn) dialer(ctx context.Context) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: dialTimeout}
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// amqp091 clears the deadline once the handshake is done.
		if err := conn.SetDeadline(time.Now().Add(dialTimeout)); err != nil {
			conn.Close()
			return nil, err
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.closed {
			conn.Close()
			return nil, net.ErrClosed
		}
		n.conn = conn
		return conn, nil
	}
}

func (n *netConn) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	if n.conn != nil {
		n.conn.Close()
	}
}
