package slots

import (
	"context"
	"errors"
	"fmt"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/wire"
)

// republisher publishes the rows of a gap on one session and counts the broker's confirms. Any
// failure ends the recovery. Nothing is retried here, since running recover again repeats it all.
//
// The one exception is a row the broker refuses for its size (wire.TooLargeError). That closes the
// session and would fail every recovery again. A large row (aloneFrom bytes or more) is published
// alone. The confirms of the rows before it are awaited first, and its own after it. If the broker
// refuses it for its size, the republisher opens a new session. It parks the row without its
// payload, with the broker's reason, as walbox run does. It keeps at most republishWindow messages
// in flight: the publisher does not bound them.
type republisher struct {
	pub       Publisher
	dial      Dialer // opens a new session after a refusal for size; nil: none is opened
	confirms  <-chan wire.Confirm
	onParked  func(p *wire.Parked)
	sent      int64 // messages published or parked
	confirmed int64
	published int64
	parked    int64
}

// row publishes one row of t as the relay would have, or parks it as the relay would have.
func (p *republisher) row(ctx context.Context, t *gapTable, values [][]byte) error {
	m, err := t.rows.Message(values)
	if decoder.IsBadRow(err) {
		var de *decoder.Error
		errors.As(err, &de)
		return p.park(ctx, &de.Partial, t.mapping.Table.String(), err, 0)
	}
	if err != nil {
		return fmt.Errorf("table %s: %w", t.mapping.Table, err)
	}
	if len(m.Payload) >= aloneFrom && p.dial != nil {
		return p.alone(ctx, t, &m)
	}
	if err := p.room(ctx); err != nil {
		return err
	}
	_, err = p.pub.Publish(ctx, &m)
	if errors.Is(err, wire.ErrUnpublishable) {
		return p.park(ctx, &m, t.mapping.Table.String(), err, 0)
	}
	if err != nil {
		return fmt.Errorf("publish %s: %w", m.AMQPMessageID(), err)
	}
	p.sent++
	p.published++
	return p.drain()
}

// aloneFrom is the payload size from which recover publishes a row alone (see republisher). A
// broker's max_message_size is rarely set lower.
const aloneFrom = 1 << 20

// alone publishes the large row m alone. It parks the row without its payload if the broker refuses
// it for its size.
func (p *republisher) alone(ctx context.Context, t *gapTable, m *wire.Message) error {
	if err := p.wait(ctx); err != nil {
		return err
	}
	_, err := p.pub.Publish(ctx, m)
	if errors.Is(err, wire.ErrUnpublishable) {
		return p.park(ctx, m, t.mapping.Table.String(), err, 0)
	}
	if err == nil {
		p.sent++
		if err = p.wait(ctx); err == nil {
			p.published++
			return nil
		}
		p.sent--
	}
	var tl *wire.TooLargeError
	if !errors.As(err, &tl) {
		return fmt.Errorf("publish %s: %w", m.AMQPMessageID(), err)
	}
	if err := p.reopen(ctx); err != nil {
		return err
	}
	parked := *m
	parked.Payload = nil // the broker would refuse it again
	return p.park(ctx, &parked, t.mapping.Table.String(),
		fmt.Errorf("%w: refused by the broker: %s", wire.ErrUnpublishable, tl.Reason), len(m.Payload))
}

// reopen replaces the session the broker closed with a new one.
func (p *republisher) reopen(ctx context.Context) error {
	_ = p.pub.Close()
	pub, err := p.dial(ctx)
	if err != nil {
		return fmt.Errorf("connect to broker: %w", err)
	}
	p.pub, p.confirms = pub, pub.Confirms()
	return nil
}

// park sets the row aside on the park exchange. A recovered row has no WAL position: its
// x-walbox-lsn header is empty.
// The payload's size is size where it was dropped, else 0.
func (p *republisher) park(ctx context.Context, m *wire.Message, table string, why error, size int) error {
	parked := &wire.Parked{Message: *m, Reason: why.Error(), Table: table, Size: size}
	if err := p.room(ctx); err != nil {
		return err
	}
	if _, err := p.pub.Park(ctx, parked); err != nil {
		return fmt.Errorf("park %s: %w", m.AMQPMessageID(), err)
	}
	p.sent++
	p.parked++
	if p.onParked != nil {
		p.onParked(parked)
	}
	return p.drain()
}

// drain applies the confirms already there, without waiting.
func (p *republisher) drain() error {
	for {
		select {
		case c, ok := <-p.confirms:
			if err := p.apply(c, ok); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// republishWindow bounds the messages recover has in flight, as Config.Window's default does the relay's.
const republishWindow = 1024

// room waits until fewer than republishWindow messages are in flight.
func (p *republisher) room(ctx context.Context) error {
	if p.sent-p.confirmed < republishWindow {
		return nil
	}
	return p.waitFor(ctx, p.sent-republishWindow+1)
}

// wait blocks until the broker confirmed every message sent.
func (p *republisher) wait(ctx context.Context) error { return p.waitFor(ctx, p.sent) }

// waitFor writes what the publisher holds and blocks until n messages are confirmed.
func (p *republisher) waitFor(ctx context.Context, n int64) error {
	if f, ok := p.pub.(wire.Flusher); ok {
		if err := f.Flush(); err != nil {
			return fmt.Errorf("%d of %d messages not confirmed: %w", p.sent-p.confirmed, p.sent, err)
		}
	}
	for p.confirmed < n {
		select {
		case c, ok := <-p.confirms:
			if err := p.apply(c, ok); err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("%d of %d messages not confirmed: %w", p.sent-p.confirmed, p.sent, ctx.Err())
		}
	}
	return nil
}

func (p *republisher) apply(c wire.Confirm, ok bool) error {
	switch {
	case !ok:
		return fmt.Errorf("broker session ended with %d of %d messages not confirmed", p.sent-p.confirmed, p.sent)
	case c.Err != nil:
		return fmt.Errorf("message %d of %d not confirmed: %w", c.Seq, p.sent, c.Err)
	}
	p.confirmed++
	return nil
}
