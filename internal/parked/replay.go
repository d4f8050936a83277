package parked

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/wire"
)

// Replay publishes the parked messages of ids (all, with all) as the relay would have. Each goes to
// its own exchange, or the relay's, with its original id, headers and routing key. A message
// whose row is still in its outbox table is read from there (Config.DB). So a fixed row goes out fixed.
// Others are rebuilt from the parked copy. One that still cannot be published is parked again with
// its new reason. The parked copies are removed only once the broker confirmed the new message.
func Replay(ctx context.Context, cfg Config, ids []string, all bool, report func(Outcome)) error {
	w := &writer{dial: cfg.Dial, db: cfg.Database}
	defer w.close()
	rows := newRows(cfg.DB, cfg.Mappings)
	_, err := take(ctx, cfg, ids, all, func(ctx context.Context, r *publisher.ParkedReader, g Group) error {
		o, err := w.replay(ctx, rows, g)
		if err != nil {
			return fmt.Errorf("replay %s: %w", g[0].ID, err)
		}
		if o.Action == leftParked {
			report(o)
			return nil
		}
		killpoint.Hit("parked.confirmed")
		if err := remove(r, g); err != nil {
			return err
		}
		o.Copies = len(g)
		report(o)
		return nil
	})
	return err
}

// writer publishes one message at a time and waits for its confirm. A broker that refuses one for
// its size closes the session: the writer dials a new one.
type writer struct {
	dial func(ctx context.Context) (*publisher.Session, error)
	s    *publisher.Session
	db   string // this database, for a copy parked again that did not name its own
}

func (w *writer) close() {
	if w.s != nil {
		_ = w.s.Close()
	}
}

func (w *writer) replay(ctx context.Context, rows *rows, g Group) (Outcome, error) {
	p := g[0]
	o := Outcome{ID: p.ID, Action: "replayed", Source: "parked copy"}
	m, found, err := rows.read(ctx, p.Table, p.ID, p.CreatedAt)
	switch {
	case decoder.IsBadRow(err):
		var de *decoder.Error
		errors.As(err, &de)
		o.Source = "table row"
		return w.parkAgain(ctx, p, &de.Partial, 0, err, o)
	case err != nil:
		return o, err
	case found:
		o.Source = "table row"
		copied, _ := p.Message()
		m.CommitTime = copied.CommitTime // the row's, which the table does not hold
	default:
		var kept bool
		m, kept = p.Message()
		if err = fromCopy(m, kept, p.BodyDropped(), p.Size); err != nil {
			return w.parkAgain(ctx, p, &m, p.Size, err, o)
		}
	}
	if later, err := notYet(ctx, rows, &m, &o); err != nil || later {
		return o, err
	}
	err = w.send(ctx, func(s *publisher.Session) (uint64, error) { return s.Publish(ctx, &m) })
	var tl *wire.TooLargeError
	switch {
	case errors.Is(err, wire.ErrUnpublishable):
		return w.parkAgain(ctx, p, &m, 0, err, o)
	case errors.As(err, &tl):
		size := len(m.Payload)
		m.Payload = nil // the broker would refuse it again
		return w.parkAgain(ctx, p, &m, size, fmt.Errorf("%w: refused by the broker: %s", wire.ErrUnpublishable, tl.Reason), o)
	}
	return o, err
}

// parkAgain parks m again with why, in place of p.
func (w *writer) parkAgain(ctx context.Context, p *publisher.ParkedMessage, m *wire.Message, size int, why error, o Outcome) (Outcome, error) {
	again := &wire.Parked{Message: *m, Reason: why.Error(), Table: p.Table, LSN: p.LSN, Size: size, Database: cmp.Or(p.Database, w.db)}
	if err := w.send(ctx, func(s *publisher.Session) (uint64, error) { return s.Park(ctx, again) }); err != nil {
		return o, fmt.Errorf("park again: %w", err)
	}
	o.Action, o.Reason = "parked again", why.Error()
	return o, nil
}

// send makes one publish on the session, dialed if need be, and waits for its confirm.
func (w *writer) send(ctx context.Context, publish func(*publisher.Session) (uint64, error)) error {
	if w.s == nil {
		s, err := w.dial(ctx)
		if err != nil {
			return err
		}
		w.s = s
	}
	if _, err := publish(w.s); err != nil {
		if errors.Is(err, wire.ErrSessionClosed) {
			w.close()
			w.s = nil
		}
		return err
	}
	err := w.s.Flush()
	if err == nil {
		err = w.confirm(ctx)
	}
	if err != nil && w.s.Err() != nil {
		w.close()
		w.s = nil
	}
	return err
}

func (w *writer) confirm(ctx context.Context) error {
	select {
	case c, ok := <-w.s.Confirms():
		if !ok {
			return fmt.Errorf("not confirmed: %w", w.s.Err())
		}
		return c.Err
	case <-ctx.Done():
		return fmt.Errorf("not confirmed: %w", ctx.Err())
	}
}

// leftParked is the action of a replay that found its row not due yet.
const leftParked = "left parked"

// notYet reports whether m is due later (its deliver_at column): replay leaves it parked, and says
// so in o. A replay sends at once, so it would leave early. Due is by the database's clock, as for
// the relay.
func notYet(ctx context.Context, r *rows, m *wire.Message, o *Outcome) (bool, error) {
	if m.DeliverAt.IsZero() {
		return false, nil
	}
	now, err := r.now(ctx)
	if err != nil {
		return false, err
	}
	if !m.DeliverAt.After(now) {
		return false, nil
	}
	o.Action, o.Reason = leftParked, "due at "+m.DeliverAt.UTC().Format(time.RFC3339)+"; replay it then"
	return true, nil
}

// fromCopy says why m, a row rebuilt from its parked copy, still cannot be published, or nil.
// The copy kept its headers if headersKept, and its payload of size bytes unless bodyDropped.
func fromCopy(m wire.Message, headersKept, bodyDropped bool, size int) error {
	switch {
	case !headersKept:
		return fmt.Errorf("%w: the row's headers were too large to keep in the parked copy, and the row is not in its table", wire.ErrUnpublishable)
	case bodyDropped:
		return fmt.Errorf("%w: the parked copy lacks the payload of %d bytes, and the row is not in its table", wire.ErrUnpublishable, size)
	case m.EventType == "":
		return fmt.Errorf("%w: no event type", decoder.ErrBadRow)
	case !json.Valid(m.Payload):
		return fmt.Errorf("%w: the payload is not JSON", decoder.ErrBadRow)
	}
	for k := range m.Headers {
		if wire.ReservedHeader(k) {
			return fmt.Errorf("%w: header %q: names starting with %s are reserved for walbox", decoder.ErrBadRow, k, wire.ReservedHeaderPrefix)
		}
	}
	return nil
}
