package republish

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/wire"
)

// Dialer opens a publishing session.
type Dialer func(ctx context.Context) (wire.Publisher, error)

// Publisher publishes rows on one session and counts the broker's confirms. Any failure ends it.
// Nothing is retried here: the caller runs again.
//
// The one exception is a row the broker refuses for its size (wire.TooLargeError). That closes the
// session and would fail every run again. A large row (aloneFrom bytes or more) is published
// alone. The confirms of the rows before it are awaited first, and its own after it. If the broker
// refuses it for its size, the Publisher opens a new session. It parks the row without its
// payload, with the broker's reason, as walbox run does. It keeps at most Window messages in
// flight: the publisher does not bound them.
type Publisher struct {
	// Database names the rows' database in their parked copies (wire.ParkedBy); "" names none.
	Database string

	pub       wire.Publisher
	dial      Dialer // opens a new session after a refusal for size; nil: none is opened
	confirms  <-chan wire.Confirm
	onParked  func(p *wire.Parked)
	sent      int64 // messages published or parked
	confirmed int64
	published int64
	parked    int64
	scheduled int64
	now       time.Time // rows due after it are scheduled (ScheduleAfter); zero: none
}

// Scheduler is a session that holds a message until its DeliverAt (replication.Scheduler).
type Scheduler interface {
	Schedule(ctx context.Context, m *wire.Message) (uint64, error)
}

// errScheduledStream is why a row due later is parked when publishing into a stream.
var errScheduledStream = errors.New("deliver_at is later than now: a stream keeps commit order, " +
	"so scheduled delivery is for queues (docs/outbox.md#scheduled-delivery)")

// ScheduleAfter makes Row hand a row due after now to the session's schedule (Scheduler). The time
// now is the server's clock. walbox run does the same. A session without a schedule (a stream's)
// parks such a row, as run does.
func (p *Publisher) ScheduleAfter(now time.Time) { p.now = now }

// Scheduled returns the rows handed to the schedule so far, of those Published counts.
func (p *Publisher) Scheduled() int64 { return p.scheduled }

// New returns a Publisher on the session pub. The dial function, unless nil, opens a new session
// after the broker refused a row for its size. The function onParked, unless nil, is told about
// every row parked.
func New(pub wire.Publisher, dial Dialer, onParked func(p *wire.Parked)) *Publisher {
	return &Publisher{pub: pub, dial: dial, confirms: pub.Confirms(), onParked: onParked}
}

// Published returns the rows published so far; Parked the rows parked. Both count rows handed to
// the session, confirmed or not: Wait confirms them.
func (p *Publisher) Published() int64 { return p.published }

// Parked returns the rows parked so far.
func (p *Publisher) Parked() int64 { return p.parked }

// Close closes the current session.
func (p *Publisher) Close() error { return p.pub.Close() }

// Flush writes what the session holds back, if it is a wire.Flusher. A caller about to wait calls
// it, as the relay does.
func (p *Publisher) Flush() error {
	if f, ok := p.pub.(wire.Flusher); ok {
		return f.Flush()
	}
	return nil
}

// Row publishes one row of table, read with rows, as the relay would have. Or it parks the row as
// the relay would have. The commit time, unless zero, is its transaction's (wire.HeaderCommitTime).
func (p *Publisher) Row(ctx context.Context, rows *decoder.TableRows, table wire.Table, values [][]byte, commit time.Time) error {
	m, err := rows.Message(values)
	m.CommitTime = commit
	if decoder.IsBadRow(err) {
		var de *decoder.Error
		errors.As(err, &de)
		return p.park(ctx, &de.Partial, table.String(), err, 0)
	}
	if err != nil {
		return fmt.Errorf("table %s: %w", table, err)
	}
	if p.toSchedule(&m, commit) {
		return p.schedule(ctx, table, &m)
	}
	if len(m.Payload) >= aloneFrom && p.dial != nil {
		return p.alone(ctx, table, &m)
	}
	if err := p.room(ctx); err != nil {
		return err
	}
	_, err = p.pub.Publish(ctx, &m)
	if errors.Is(err, wire.ErrUnpublishable) {
		return p.park(ctx, &m, table.String(), err, 0)
	}
	if err != nil {
		return fmt.Errorf("publish %s: %w", m.AMQPMessageID(), err)
	}
	p.sent++
	p.published++
	return p.drain()
}

// toSchedule reports whether m goes to the schedule (or is parked, into a stream). A session with a
// schedule takes every row due after its commit, as walbox run does. There a cancel's tombstone is
// checked. With no commit time, that is every row with a deliver_at: one due already leaves at once.
func (p *Publisher) toSchedule(m *wire.Message, commit time.Time) bool {
	if p.now.IsZero() || m.DeliverAt.IsZero() {
		return false
	}
	if _, ok := p.pub.(Scheduler); ok && (commit.IsZero() || m.DeliverAt.After(commit)) {
		return true
	}
	return m.DeliverAt.After(p.now)
}

// schedule hands m, due later, to the session's schedule, or parks it without one.
func (p *Publisher) schedule(ctx context.Context, table wire.Table, m *wire.Message) error {
	sc, ok := p.pub.(Scheduler)
	if !ok {
		return p.park(ctx, m, table.String(), errScheduledStream, 0)
	}
	if err := p.room(ctx); err != nil {
		return err
	}
	if _, err := sc.Schedule(ctx, m); err != nil {
		return fmt.Errorf("schedule %s: %w", m.AMQPMessageID(), err)
	}
	p.sent++
	p.published++
	p.scheduled++
	return p.drain()
}

// aloneFrom is the payload size from which a row is published alone (see Publisher). A broker's
// max_message_size is rarely set lower.
const aloneFrom = 1 << 20

// alone publishes the large row m alone. It parks the row without its payload if the broker refuses
// it for its size.
func (p *Publisher) alone(ctx context.Context, table wire.Table, m *wire.Message) error {
	if err := p.Wait(ctx); err != nil {
		return err
	}
	_, err := p.pub.Publish(ctx, m)
	if errors.Is(err, wire.ErrUnpublishable) {
		return p.park(ctx, m, table.String(), err, 0)
	}
	if err == nil {
		p.sent++
		if err = p.Wait(ctx); err == nil {
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
	return p.park(ctx, &parked, table.String(),
		fmt.Errorf("%w: refused by the broker: %s", wire.ErrUnpublishable, tl.Reason), len(m.Payload))
}

// reopen replaces the session the broker closed with a new one.
func (p *Publisher) reopen(ctx context.Context) error {
	_ = p.pub.Close()
	pub, err := p.dial(ctx)
	if err != nil {
		return fmt.Errorf("connect to broker: %w", err)
	}
	p.pub, p.confirms = pub, pub.Confirms()
	return nil
}

// park sets the row aside on the park exchange. A row read from a table has no WAL position: its
// x-walbox-lsn header is empty. The payload's size is size where it was dropped, else 0.
func (p *Publisher) park(ctx context.Context, m *wire.Message, table string, why error, size int) error {
	parked := &wire.Parked{Message: *m, Reason: why.Error(), Table: table, Size: size, Database: p.Database}
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
func (p *Publisher) drain() error {
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

// Window bounds the messages a Publisher has in flight, as replication.DefaultWindow does the relay's.
const Window = wire.DefaultWindow

// room waits until fewer than Window messages are in flight.
func (p *Publisher) room(ctx context.Context) error {
	if p.sent-p.confirmed < Window {
		return nil
	}
	return p.waitFor(ctx, p.sent-Window+1)
}

// Wait blocks until the broker confirmed every message sent.
func (p *Publisher) Wait(ctx context.Context) error { return p.waitFor(ctx, p.sent) }

// waitFor writes what the publisher holds and blocks until n messages are confirmed.
func (p *Publisher) waitFor(ctx context.Context, n int64) error {
	if err := p.Flush(); err != nil {
		return fmt.Errorf("%d of %d messages not confirmed: %w", p.sent-p.confirmed, p.sent, err)
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

func (p *Publisher) apply(c wire.Confirm, ok bool) error {
	switch {
	case !ok:
		return fmt.Errorf("broker session ended with %d of %d messages not confirmed", p.sent-p.confirmed, p.sent)
	case c.Err != nil:
		return fmt.Errorf("message %d of %d not confirmed: %w", c.Seq, p.sent, c.Err)
	}
	p.confirmed++
	return nil
}
