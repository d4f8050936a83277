package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"golang.org/x/sync/errgroup"

	"github.com/walbox/walbox/publisher"
)

// runCeiling publishes spec.Count messages over spec.Publishers connections (one if 0), each
// with a channel of its own and pipelined confirms (at most spec.Window in flight), publisher i
// on node i mod the nodes, as fast as the broker takes them or at spec.Rate per second in all.
// Publisher i publishes the seqs i, i+n, i+2n, ..., on the one schedule they share. The messages
// are built as walbox builds them (publisher.Publishing) and published like walbox publishes them:
// persistent, mandatory, to the same exchange. Then it waits to be stopped, so that its CPU time
// and peak RSS can be read while it still exists.
func runCeiling(ctx context.Context, spec childSpec) error {
	n := max(spec.Publishers, 1)
	nodes := spec.Nodes
	if len(nodes) == 0 {
		nodes = []string{spec.AMQPURL}
	}
	pipes := make([]*pipeline, n)
	for i := range pipes {
		p, err := dialPipeline(nodes[i%len(nodes)], spec.Window, !spec.NoConfirms)
		if err != nil {
			return err
		}
		defer p.conn.Close()
		pipes[i] = p
	}
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for i, p := range pipes {
		g.Go(func() error { return p.publishShare(gctx, spec, i, n, start) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	fmt.Printf("published %d messages on %d connections in %v (confirms: %v)\n", spec.Count, n, time.Since(start), !spec.NoConfirms)
	<-ctx.Done()
	var latencies, calls []time.Duration
	for _, p := range pipes {
		latencies = append(latencies, p.latencies...)
		calls = append(calls, p.calls...)
	}
	return writeResult(spec.ResultFile, latencies, calls)
}

// publishShare publishes publisher i's share of n: the seqs i, i+n, i+2n, ... below spec.Count,
// each when the schedule of spec.Rate has it due (at once without a rate), and waits for every
// confirm, also once ctx has ended: the benchmark stops the ceiling as soon as the consumer has
// every message, which may be before the last confirms arrived (the stop's timeout bounds the
// wait).
func (p *pipeline) publishShare(ctx context.Context, spec childSpec, i, n int, start time.Time) error {
	for seq := i; seq < spec.Count; seq += n {
		if spec.Rate > 0 {
			due := start.Add(time.Duration(float64(seq) / float64(spec.Rate) * float64(time.Second)))
			if err := p.idleUntil(ctx, due); err != nil {
				return err
			}
		}
		now := time.Now()
		m := message(seq, spec.Payload, now)
		if err := p.publish(ctx, spec.Exchange, m.EventType, publisher.Publishing(m, "walbox"), now.UnixNano()); err != nil {
			return err
		}
	}
	return p.waitAll(context.WithoutCancel(ctx))
}

// pipeline publishes with at most window messages awaiting their confirm, and records the time
// from each message's start (a publish or commit time) to its confirm. Without confirms (acks
// nil) it publishes transient messages, not mandatory, and waits for nothing.
type pipeline struct {
	conn      *amqp.Connection
	ch        *amqp.Channel
	window    int
	acks      <-chan amqp.Confirmation
	starts    []int64 // Unix nanoseconds of each message in flight, in publish order; 0: not measured
	latencies []time.Duration
	calls     []time.Duration // of each measured publish call, to its return: amqp091 writes within it
}

// dialPipeline opens a connection to url and a channel on it, in confirm mode if confirm. The
// caller closes the connection.
func dialPipeline(url string, window int, confirm bool) (*pipeline, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("dial broker: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("open channel: %w", err)
	}
	if !confirm {
		return &pipeline{conn: conn, ch: ch, window: window}, nil
	}
	if err := ch.Confirm(false); err != nil {
		conn.Close()
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	return &pipeline{conn: conn, ch: ch, window: window, acks: ch.NotifyPublish(make(chan amqp.Confirmation, window+64))}, nil
}

// publish publishes msg; start is the time its confirm latency (and its publish call's
// duration) counts from, or 0.
func (p *pipeline) publish(ctx context.Context, exchange, key string, msg amqp.Publishing, start int64) error {
	if p.acks == nil {
		msg.DeliveryMode = amqp.Transient
		if err := p.ch.PublishWithContext(ctx, exchange, key, false, false, msg); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		p.called(start)
		return nil
	}
	for len(p.starts) >= p.window {
		if err := p.waitOne(ctx); err != nil {
			return err
		}
	}
	if err := p.ch.PublishWithContext(ctx, exchange, key, true, false, msg); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	p.called(start)
	p.starts = append(p.starts, start)
	return nil
}

// called records how long the publish call that began at start took, if start is set.
func (p *pipeline) called(start int64) {
	if start != 0 {
		p.calls = append(p.calls, time.Duration(time.Now().UnixNano()-start))
	}
}

func (p *pipeline) waitOne(ctx context.Context) error {
	select {
	case c, ok := <-p.acks:
		return p.take(c, ok)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// idleUntil takes confirms as they arrive until t, so that their latency is measured when they
// come and not when the window next fills.
func (p *pipeline) idleUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	for {
		select {
		case c, ok := <-p.acks:
			if err := p.take(c, ok); err != nil {
				return err
			}
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (p *pipeline) take(c amqp.Confirmation, ok bool) error {
	if !ok {
		return errors.New("channel closed with messages unconfirmed")
	}
	if !c.Ack {
		return fmt.Errorf("broker nacked delivery tag %d", c.DeliveryTag)
	}
	// amqp091 hands confirmations over in delivery-tag order, which is publish order.
	if start := p.starts[0]; start != 0 {
		p.latencies = append(p.latencies, time.Duration(time.Now().UnixNano()-start))
	}
	p.starts = p.starts[1:]
	return nil
}

func (p *pipeline) waitAll(ctx context.Context) error {
	for len(p.starts) > 0 {
		if err := p.waitOne(ctx); err != nil {
			return err
		}
	}
	return nil
}

// childResult is what a child reports when it stops.
type childResult struct {
	Confirm *Percentiles `json:"confirm"`         // start to broker confirm
	Write   *Percentiles `json:"write,omitempty"` // ceiling: start to the publish call's return
}

// writeResult writes the confirm latencies, and the publish calls' durations if any, to path,
// if set.
func writeResult(path string, latencies, calls []time.Duration) error {
	if path == "" {
		return nil
	}
	data, err := json.Marshal(childResult{Confirm: percentilesOf(latencies), Write: percentilesOf(calls)})
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}

// readResult reads what a child wrote with writeResult.
func readResult(path string) (childResult, error) {
	var r childResult
	data, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("read child result: %w", err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("read child result: %w", err)
	}
	return r, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
