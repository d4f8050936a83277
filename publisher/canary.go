package publisher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/wire"
)

// canaryMaxLength bounds the canary queue: messages past it drop from its head, and none is refused.
// So a canary that nobody reads never holds the relay up.
const canaryMaxLength = 100

// canaryExpires removes a canary queue unused this long: one of a killed process, say. A reader's
// own queue always has its consumer, so it never expires.
const canaryExpires = time.Minute

// CanaryReader reads walbox's canary back from a queue of its own. The queue is bound to the
// exchange with the routing key wire.CanaryEventType. Close it when done.
type CanaryReader struct {
	conn       *amqp.Connection
	deliveries <-chan amqp.Delivery
	closed     chan *amqp.Error
}

// DialCanary opens a reader of the canary queue on the first broker that answers. The queue is
// the reader's own: quorum, at most canaryMaxLength messages, gone after canaryExpires unused. It
// has a single active consumer, so no other process takes its canaries. It is not exclusive: an
// operator may unbind or delete it from another connection. Give each dial a new name, so that no queue left
// from before is met. It binds the queue to the exchange, which it does not declare: the relay's
// session does.
func (e *Endpoints) DialCanary(ctx context.Context, queue string) (*CanaryReader, error) {
	var errs []string
	for _, cfg := range e.cfgs {
		r, err := dialCanary(ctx, cfg.WithDefaults(), queue)
		if err == nil {
			return r, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		errs = append(errs, err.Error())
	}
	return nil, errors.New(strings.Join(errs, "; "))
}

func dialCanary(ctx context.Context, cfg Config, queue string) (*CanaryReader, error) {
	uri, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(cfg.AppID + " canary")
	conn, err := amqp.DialConfig(cfg.URL, amqp.Config{
		Heartbeat: cfg.Heartbeat, TLSClientConfig: cfg.TLS.Clone(), Properties: props,
		Dial: func(network, addr string) (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, network, addr) },
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", host(uri), redactErr(err, cfg.URL))
	}
	r, err := readCanary(conn, cfg, queue)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return r, nil
}

func readCanary(conn *amqp.Connection, cfg Config, queue string) (*CanaryReader, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	// Quorum: a classic durable queue outlives its lost node, and the relay's canaries routed to it
	// are nacked. Transient queues must be exclusive from RabbitMQ 4.3. A quorum queue expires instead
	// of auto-deleting. An exclusive consumer did not keep others off it; a single active one does.
	args := amqp.Table{"x-max-length": int64(canaryMaxLength), "x-queue-type": QueueQuorum,
		"x-expires": canaryExpires.Milliseconds(), "x-single-active-consumer": true}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		return nil, fmt.Errorf("declare queue %s: %w", queue, err)
	}
	if err := ch.QueueBind(queue, wire.CanaryEventType, cfg.Exchange, false, nil); err != nil {
		return nil, fmt.Errorf("bind queue %s to exchange %s: %w", queue, cfg.Exchange, err)
	}
	deliveries, err := ch.Consume(queue, "", true, true, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("consume queue %s: %w", queue, err)
	}
	return &CanaryReader{conn: conn, deliveries: deliveries, closed: conn.NotifyClose(make(chan *amqp.Error, 1))}, nil
}

// Next waits for the next canary message. It skips a producer's row of the canary's routing key.
// An error means the reader is gone: dial again.
func (r *CanaryReader) Next(ctx context.Context) (wire.Canary, error) {
	for {
		select {
		case d, ok := <-r.deliveries:
			if !ok {
				return wire.Canary{}, r.closeErr()
			}
			if !wire.IsCanary(d.Type, d.Headers) {
				continue
			}
			t, _ := wire.ParseCommitTime(d.Headers[wire.HeaderCommitTime])
			return wire.Canary{Body: d.Body, CommitTime: t}, nil
		case <-ctx.Done():
			return wire.Canary{}, ctx.Err()
		}
	}
}

// closeErr says why the connection or channel closed.
func (r *CanaryReader) closeErr() error {
	select {
	case err := <-r.closed:
		if err != nil {
			return fmt.Errorf("canary connection closed: %w", err)
		}
	case <-time.After(100 * time.Millisecond):
	}
	return errors.New("canary consumer cancelled: the queue was deleted, or its channel closed")
}

// Close closes the reader's connection.
func (r *CanaryReader) Close() error { return r.conn.Close() }
