package parked

import (
	"cmp"
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

// ErrOtherDatabase: an id given was parked by another database relaying to the same exchange or
// stream. Each database's walbox parked acts on its own parked rows only.
var ErrOtherDatabase = errors.New("parked by another database")

// Config is what the commands need besides the ids.
type Config struct {
	// Database names this database (wire.ParkedBy). The commands pass over parked copies of
	// another; "" acts on all.
	Database string
	// Dial opens a publishing session with the relay's broker settings.
	Dial func(ctx context.Context) (*publisher.Session, error)
	// DB, when set, is where replay reads each row's current version from its outbox table.
	DB *pgx.Conn
	// Mappings are the outbox tables, as the relay reads them.
	Mappings []wire.Mapping
	// Limit is how many parked messages a command reads at most; 0 means DefaultLimit.
	Limit int
}

// Group is the parked copies of one message id, in queue order. A row is parked more than once
// where the relay parked it again after a restart.
type Group []*publisher.ParkedMessage

// Listing is what List read of the park queue.
type Listing struct {
	// Messages are this database's, in queue order.
	Messages []publisher.ParkedMessage
	// Others maps the ids of other databases' messages to their database.
	Others map[string]string
	// More is how many more messages the queue held, past Config.Limit: they were not read.
	More int
}

// List returns the ready messages of the park queue, up to Config.Limit, and returns them to the
// queue.
func List(ctx context.Context, cfg Config) (Listing, error) {
	r, err := take(ctx, cfg, nil, true, func(context.Context, *publisher.ParkedReader, Group) error { return nil })
	if err != nil {
		return Listing{}, err
	}
	l := Listing{More: r.More}
	l.Messages, l.Others = split(r.Messages, func(p *publisher.ParkedMessage) (string, string) { return p.ID, p.Database }, cfg.Database)
	return l, nil
}

// OtherDatabase is the error for id, which database db parked, not this one (mine).
func OtherDatabase(id, db, mine string) error {
	return fmt.Errorf("%s: %w %s, not by this one (%s); run walbox parked with that database's settings", id, ErrOtherDatabase, db, mine)
}

// split returns the items of database, and those that name none, in order. Others maps the ids of
// the rest to their database. An empty database takes every item.
func split[T any](items []T, of func(*T) (id, db string), database string) (own []T, others map[string]string) {
	others = map[string]string{}
	for i := range items {
		id, db := of(&items[i])
		if database == "" || db == "" || db == database {
			own = append(own, items[i])
		} else {
			others[id] = db
		}
	}
	return own, others
}

// pick groups the items of database by id, as selectGroups does. An id only another database
// parked is an error wrapping ErrOtherDatabase.
func pick[T any](items []T, of func(*T) (id, db string), database string, ids []string, all bool) ([][]*T, error) {
	own, others := split(items, of, database)
	return pickOwn(own, others, of, database, ids, all)
}

// pickOwn is pick of items split already: own, and the ids of others by database.
func pickOwn[T any](own []T, others map[string]string, of func(*T) (id, db string), database string, ids []string, all bool) ([][]*T, error) {
	owned := map[string]bool{}
	for i := range own {
		id, _ := of(&own[i])
		owned[id] = true
	}
	for _, id := range ids {
		if db, ok := others[id]; ok && !owned[id] {
			return nil, OtherDatabase(id, db, database)
		}
	}
	return selectGroups(own, func(p *T) string { id, _ := of(p); return id }, ids, all)
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
// What handle does not remove goes back to the queue, renewed where readers returned it often. It
// renews them also when it fails: each failed run counts a return too. It returns the reader.
func take(ctx context.Context, cfg Config, ids []string, all bool,
	handle func(context.Context, *publisher.ParkedReader, Group) error) (*publisher.ParkedReader, error) {
	s, err := cfg.Dial(ctx)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	r, err := s.ReadParked(ctx, cmp.Or(cfg.Limit, DefaultLimit))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	err = handleAll(ctx, cfg, r, ids, all, handle)
	if rerr := renew(ctx, cfg, r); err == nil {
		err = rerr
	}
	if err != nil {
		return nil, err
	}
	return r, r.Close()
}

// DefaultLimit is how many parked messages a command reads at most: they are held in memory.
const DefaultLimit = 10000

func handleAll(ctx context.Context, cfg Config, r *publisher.ParkedReader, ids []string, all bool,
	handle func(context.Context, *publisher.ParkedReader, Group) error) error {
	gs, err := pick(r.Messages, func(p *publisher.ParkedMessage) (string, string) { return p.ID, p.Database }, cfg.Database, ids, all)
	if errors.Is(err, ErrUnknownID) && r.More > 0 {
		err = fmt.Errorf("%w; only the first %d of %d parked messages were read", err, len(r.Messages), len(r.Messages)+r.More)
	}
	if err != nil {
		return err
	}
	for _, g := range gs {
		if err := handle(ctx, r, g); err != nil {
			return err
		}
	}
	return nil
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
