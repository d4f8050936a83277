package parked

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/wire"
)

// ErrUnknownID: an id given is not in the park queue (or another reader holds it).
var ErrUnknownID = errors.New("not parked")

// Config is what the commands need besides the ids.
type Config struct {
	// Dial opens a publishing session with the relay's broker settings.
	Dial func(ctx context.Context) (*publisher.Session, error)
	// DB, when set, is where replay reads each row's current version from its outbox table.
	DB *pgx.Conn
	// Mappings are the outbox tables, as the relay reads them.
	Mappings []wire.Mapping
}

// Group is the parked copies of one message id, in queue order. A row is parked more than once
// where the relay parked it again after a restart.
type Group []*publisher.ParkedMessage

// List returns every ready message of the park queue, in queue order, and returns them.
func List(ctx context.Context, cfg Config) ([]publisher.ParkedMessage, error) {
	return take(ctx, cfg, nil, true, func(context.Context, *publisher.ParkedReader, Group) error { return nil })
}

// Select groups msgs by id, in queue order: those of ids, or all of them. An id not among them
// is an error wrapping ErrUnknownID.
func Select(msgs []publisher.ParkedMessage, ids []string, all bool) ([]Group, error) {
	gs, err := selectGroups(msgs, func(p *publisher.ParkedMessage) string { return p.ID }, ids, all)
	out := make([]Group, len(gs))
	for i, g := range gs {
		out[i] = g
	}
	return out, err
}

// selectGroups groups items by id, in their order: those of ids, or all of them. An id not among
// them is an error wrapping ErrUnknownID.
func selectGroups[T any](items []T, idOf func(*T) string, ids []string, all bool) ([][]*T, error) {
	byID := map[string]int{}
	var groups [][]*T
	for i := range items {
		p := &items[i]
		if j, ok := byID[idOf(p)]; ok {
			groups[j] = append(groups[j], p)
			continue
		}
		byID[idOf(p)] = len(groups)
		groups = append(groups, []*T{p})
	}
	if all {
		return groups, nil
	}
	var out [][]*T
	var unknown []string
	taken := map[string]bool{}
	for _, id := range ids {
		j, ok := byID[id]
		switch {
		case !ok:
			unknown = append(unknown, id)
		case !taken[id]:
			out, taken[id] = append(out, groups[j]), true
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("%w: %s (walbox parked list shows the ids; another reader may hold some)", ErrUnknownID, strings.Join(unknown, ", "))
	}
	return out, nil
}

// Outcome is what became of one message id.
type Outcome struct {
	ID     string
	Copies int    // parked copies removed
	Action string // "replayed", "parked again", "left parked" or "discarded"
	Source string // for a replay: "table row" or "parked copy"
	Reason string // for "parked again": why
}

// Discard removes the parked copies of ids (all, with all). It tells report of each.
func Discard(ctx context.Context, cfg Config, ids []string, all bool, report func(Outcome)) error {
	_, err := take(ctx, cfg, ids, all, func(_ context.Context, r *publisher.ParkedReader, g Group) error {
		if err := remove(r, g); err != nil {
			return err
		}
		report(Outcome{ID: g[0].ID, Copies: len(g), Action: "discarded"})
		return nil
	})
	return err
}

// take reads the park queue, selects the groups of ids and hands each to handle, in queue order.
// What handle does not remove goes back to the queue, renewed where readers returned it often.
// It returns the messages it read.
func take(ctx context.Context, cfg Config, ids []string, all bool,
	handle func(context.Context, *publisher.ParkedReader, Group) error) ([]publisher.ParkedMessage, error) {
	s, err := cfg.Dial(ctx)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	r, err := s.ReadParked(ctx)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	groups, err := Select(r.Messages, ids, all)
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		if err := handle(ctx, r, g); err != nil {
			return nil, err
		}
	}
	if err := renew(ctx, cfg, r); err != nil {
		return nil, err
	}
	return r.Messages, r.Close()
}

// renewFrom is the count of returns from which a message is parked anew. A quorum queue counts
// every return; RabbitMQ 4.0 drops a message past 20 by default (delivery-limit).
const renewFrom = 5

// renew parks anew, in queue order, each message readers returned renewFrom times or more. It
// removes the old copy only once the broker confirmed the new one: a kill between leaves two.
func renew(ctx context.Context, cfg Config, r *publisher.ParkedReader) error {
	w := &writer{dial: cfg.Dial}
	defer w.close()
	for i := range r.Messages {
		p := &r.Messages[i]
		if p.Returned < renewFrom || r.Removed(p) {
			continue
		}
		if err := w.send(ctx, func(s *publisher.Session) (uint64, error) { return s.Repark(ctx, p) }); err != nil {
			return fmt.Errorf("renew %s in the park queue: %w", p.ID, err)
		}
		if err := r.Remove(p); err != nil {
			return err
		}
	}
	return nil
}

func remove(r *publisher.ParkedReader, g Group) error {
	for _, p := range g {
		if err := r.Remove(p); err != nil {
			return err
		}
	}
	return nil
}
