package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	// Named apart: the type wire (hotpath.go) builds pgoutput messages.
	walboxwire "github.com/walbox/walbox/wire"
)

// topology is one trial's exchange and queue, declared as walbox declares its exchange (durable
// topic with an alternate exchange), with a durable queue of the scenario's type bound to every
// routing key. The alternate exchange's queue is of sinkType (classic if empty), as walbox is
// told to declare it.
type topology struct {
	url, exchange, queue, queueType, sinkType string
}

func (t topology) declare() error {
	conn, err := amqp.Dial(t.url)
	if err != nil {
		return fmt.Errorf("declare: dial broker: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("declare: open channel: %w", err)
	}
	ae := walboxwire.DefaultAlternateExchange(t.exchange)
	steps := []struct {
		what string
		do   func() error
	}{
		{"alternate exchange", func() error { return ch.ExchangeDeclare(ae, "fanout", true, false, false, false, nil) }},
		{"alternate queue", func() error { _, err := ch.QueueDeclare(ae, true, false, false, false, t.sinkArgs()); return err }},
		{"alternate binding", func() error { return ch.QueueBind(ae, "", ae, false, nil) }},
		{"exchange", func() error {
			return ch.ExchangeDeclare(t.exchange, "topic", true, false, false, false, amqp.Table{"alternate-exchange": ae})
		}},
		{"queue", func() error {
			_, err := ch.QueueDeclare(t.queue, true, false, false, false, amqp.Table{"x-queue-type": t.queueType})
			return err
		}},
		{"binding", func() error { return ch.QueueBind(t.queue, "#", t.exchange, false, nil) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("declare %s: %w", s.what, err)
		}
	}
	return nil
}

// sinkArgs are the arguments of the alternate exchange's queue.
func (t topology) sinkArgs() amqp.Table {
	if t.sinkType == "" || t.sinkType == Classic {
		return nil
	}
	return amqp.Table{"x-queue-type": t.sinkType}
}

// remove deletes the trial's queues and exchanges, including those walbox declares; errors are
// ignored, since some may not exist.
func (t topology) remove() {
	conn, err := amqp.Dial(t.url)
	if err != nil {
		return
	}
	defer conn.Close()
	ae := walboxwire.DefaultAlternateExchange(t.exchange)
	park := t.exchange + ".parked"
	for _, q := range []string{t.queue, ae, park} {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
			_ = ch.Close()
		}
	}
	for _, x := range []string{t.exchange, ae, park} {
		if ch, err := conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(x, false, false)
			_ = ch.Close()
		}
	}
}

// consumer consumes a trial's queue (no-ack, so it never holds the broker back) and records when
// each message arrived, by the seq in its body.
type consumer struct {
	conn     *amqp.Connection
	arrivals []int64 // Unix nanoseconds of the first arrival of seq; 0: not yet
	sent     []int64 // the "ts" field of seq's body
	got      atomic.Int64
	dups     atomic.Int64
	strays   atomic.Int64 // bodies without a seq in range
	done     chan struct{}
	// stopStream ends a stream consumer (stream.go); nil for a queue's.
	stopStream func()
}

// consume starts consuming queue; seqs run from 0 to capacity-1.
func consume(url, queue string, capacity int) (*consumer, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("consumer: dial broker: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("consumer: open channel: %w", err)
	}
	deliveries, err := ch.Consume(queue, "walbox-bench", true, true, false, false, nil)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("consumer: consume %s: %w", queue, err)
	}
	c := &consumer{conn: conn, arrivals: make([]int64, capacity), sent: make([]int64, capacity), done: make(chan struct{})}
	go c.run(deliveries)
	return c, nil
}

func (c *consumer) run(deliveries <-chan amqp.Delivery) {
	defer close(c.done)
	for d := range deliveries {
		now := time.Now().UnixNano()
		seq, ok := field(d.Body, keySeq)
		if !ok || seq < 0 || seq >= int64(len(c.arrivals)) {
			c.strays.Add(1)
			continue
		}
		if c.arrivals[seq] != 0 {
			c.dups.Add(1)
			continue
		}
		c.arrivals[seq] = now
		c.sent[seq], _ = field(d.Body, keyTS)
		c.got.Add(1)
	}
}

// wait returns once n distinct messages have arrived. It gives up when ctx ends, when timeout
// passes without progress, or when alive reports that the relay is gone.
func (c *consumer) wait(ctx context.Context, n int, timeout time.Duration, alive func() error) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last, lastChange := c.got.Load(), time.Now()
	for {
		got := c.got.Load()
		if got >= int64(n) {
			return nil
		}
		if got != last {
			last, lastChange = got, time.Now()
		}
		if time.Since(lastChange) > timeout {
			return fmt.Errorf("%d of %d messages after %v without progress", got, n, timeout)
		}
		if err := alive(); err != nil {
			return fmt.Errorf("%d of %d messages: %w", got, n, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// stop ends consuming; arrivals and sent may be read after it returns.
func (c *consumer) stop() {
	if c.conn != nil {
		_ = c.conn.Close()
	}
	if c.stopStream != nil {
		c.stopStream()
	}
	<-c.done
}

// brokerVersion returns the broker's product, version and platform.
func brokerVersion(url string) string {
	conn, err := amqp.Dial(url)
	if err != nil {
		return "unknown"
	}
	defer conn.Close()
	p := conn.Properties
	return fmt.Sprintf("%v %v (%v)", p["product"], p["version"], p["platform"])
}
