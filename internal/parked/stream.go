package parked

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/wire"
)

// A park stream is append-only. Its entries that walbox parked replayed or discarded are recorded
// in walbox_parked_handled, in walbox's schema; list shows the others. A replay into the stream goes
// under a producer of its own (streampub.ReplayProducer), with a publishing id from that record.

// StreamConfig is what the commands need in stream mode.
type StreamConfig struct {
	// Stream names the nodes and the stream; its park stream is streampub.ParkStream(Stream.Stream).
	Stream streampub.Config
	// DB holds the record of the entries handled, and the outbox tables.
	DB *pgx.Conn
	// Schema is walbox's schema, the outbox table's.
	Schema string
	// Mappings are the outbox tables, as the relay reads them.
	Mappings []wire.Mapping
	// Database names this database (wire.ParkedBy): the commands pass over entries of another.
	// Its replays go under a producer of its own.
	Database string
	// Limit is how many entries a command keeps at most; 0 means DefaultLimit.
	Limit int
}

func (c *StreamConfig) park() string { return streampub.ParkStream(c.Stream.Stream) }

func (c *StreamConfig) record() string {
	return pgx.Identifier{c.Schema, "walbox_parked_handled"}.Sanitize()
}

// handled is an entry's row in walbox_parked_handled.
type handled struct {
	action string
	id     int64 // the replay's publishing id; 0 for none
}

// StreamListing is what ListStream read of the park stream.
type StreamListing struct {
	// Entries are this database's not yet replayed or discarded, in offset order.
	Entries []streampub.ParkEntry
	// Others maps the ids of other databases' entries to their database (at most Limit of them).
	Others map[string]string
	// More is how many more entries there are, past Limit: they were not kept.
	More int
	done map[int64]handled
}

// ListStream returns the park stream's entries of this database not yet replayed or discarded, in
// offset order, up to StreamConfig.Limit.
func ListStream(ctx context.Context, cfg StreamConfig) (StreamListing, error) {
	return open(ctx, cfg)
}

func entryOf(e *streampub.ParkEntry) (id, db string) { return e.ID, e.Database }

// open reads the record and the park stream. It keeps the entries of this database the record
// is not done with, up to the limit. A replay cut short is kept whatever the limit: it goes first.
func open(ctx context.Context, cfg StreamConfig) (StreamListing, error) {
	done, err := readRecord(ctx, cfg)
	if err != nil {
		return StreamListing{}, err
	}
	l := StreamListing{Others: map[string]string{}, done: done}
	limit, kept := cmp.Or(cfg.Limit, DefaultLimit), 0
	l.Entries, err = streampub.ReadPark(ctx, cfg.Stream, func(e *streampub.ParkEntry) bool {
		h, recorded := done[e.Offset]
		switch {
		case recorded && h.action != "replaying":
			return false
		case cfg.Database != "" && e.Database != "" && e.Database != cfg.Database:
			if len(l.Others) < limit {
				l.Others[e.ID] = e.Database
			}
			return false
		case kept >= limit && !recorded:
			l.More++
			return false
		}
		kept++
		return true
	})
	return l, err
}

// readRecord reads walbox_parked_handled for the park stream, by offset.
func readRecord(ctx context.Context, cfg StreamConfig) (map[int64]handled, error) {
	rows, err := cfg.DB.Query(ctx, "SELECT park_offset, action, coalesce(publishing_id, 0) FROM "+cfg.record()+
		" WHERE park_stream = $1", cfg.park())
	done := map[int64]handled{}
	var (
		off int64
		h   handled
	)
	if err == nil {
		_, err = pgx.ForEachRow(rows, []any{&off, &h.action, &h.id}, func() error { done[off] = h; return nil })
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" {
		return nil, fmt.Errorf("%s does not exist: run walbox migrate first", cfg.record())
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", cfg.record(), err)
	}
	return done, nil
}

// lock keeps a second walbox parked off the park stream until the connection ends.
func lock(ctx context.Context, cfg StreamConfig) (unlock func(), err error) {
	key := "walbox_parked:" + cfg.park()
	var ok bool
	if err := cfg.DB.QueryRow(ctx, "SELECT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtext($1))", key).Scan(&ok); err != nil {
		return nil, fmt.Errorf("lock the park stream: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("another walbox parked replays or discards on stream %s; try again once it is done", cfg.park())
	}
	return func() {
		_, _ = cfg.DB.Exec(context.Background(), "SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtext($1))", key)
	}, nil
}

// mark records the entries of g as handled with action and publishing id (0 for none).
func mark(ctx context.Context, cfg StreamConfig, g []*streampub.ParkEntry, action string, id int64) error {
	for _, e := range g {
		_, err := cfg.DB.Exec(ctx, "INSERT INTO "+cfg.record()+
			" (park_stream, park_offset, message_id, action, publishing_id) VALUES ($1, $2, $3, $4, NULLIF($5, 0))"+
			" ON CONFLICT (park_stream, park_offset) DO UPDATE SET action = EXCLUDED.action,"+
			" publishing_id = EXCLUDED.publishing_id, handled_at = pg_catalog.now()",
			cfg.park(), e.Offset, e.ID, action, id)
		if err != nil {
			return fmt.Errorf("record %s as %s: %w", e.ID, action, err)
		}
	}
	return nil
}

// taking is the park stream held by one replay or discard. It holds the entries left, their record,
// and the groups of the ids asked for.
type taking struct {
	unlock  func()
	entries []streampub.ParkEntry
	done    map[int64]handled
	groups  [][]*streampub.ParkEntry
}

// begin locks the park stream, reads it and its record, and selects the groups of ids (all,
// with all).
func begin(ctx context.Context, cfg StreamConfig, ids []string, all bool) (*taking, error) {
	unlock, err := lock(ctx, cfg)
	if err != nil {
		return nil, err
	}
	t := &taking{unlock: unlock}
	var l StreamListing
	if l, err = open(ctx, cfg); err == nil {
		t.entries, t.done = l.Entries, l.done
		t.groups, err = pickOwn(t.entries, l.Others, entryOf, cfg.Database, ids, all)
	}
	if errors.Is(err, ErrUnknownID) && l.More > 0 {
		err = fmt.Errorf("%w; only the first %d of %d parked entries were read", err, len(l.Entries), len(l.Entries)+l.More)
	}
	if err != nil {
		unlock()
		return nil, err
	}
	return t, nil
}

// DiscardStream records the entries of ids (all, with all) as discarded.
func DiscardStream(ctx context.Context, cfg StreamConfig, ids []string, all bool, report func(Outcome)) error {
	t, err := begin(ctx, cfg, ids, all)
	if err != nil {
		return err
	}
	defer t.unlock()
	done := t.done
	for _, g := range t.groups {
		if done[g[0].Offset].action == "replaying" {
			return fmt.Errorf("a replay of %s was cut short and may be in the stream: replay it first", g[0].ID)
		}
		if err := mark(ctx, cfg, g, "discarded", 0); err != nil {
			return err
		}
		report(Outcome{ID: g[0].ID, Copies: len(g), Action: "discarded"})
	}
	return nil
}

// ReplayStream publishes the entries of ids (all, with all) into the stream, as Replay does
// into the exchange. Each replay is recorded with its publishing id before it is sent, and as
// done once confirmed. A replay cut short is sent again first, with its id: the broker stores it
// once.
func ReplayStream(ctx context.Context, cfg StreamConfig, ids []string, all bool, report func(Outcome)) error {
	t, err := begin(ctx, cfg, ids, all)
	if err != nil {
		return err
	}
	defer t.unlock()
	entries, done, groups := t.entries, t.done, t.groups
	r, err := streampub.DialReplayer(cfg.Stream, cfg.Database)
	if err != nil {
		return err
	}
	defer r.Close()
	sr := &streamReplay{cfg: cfg, r: r, rows: newRows(cfg.DB, cfg.Mappings)}
	if sr.next, err = r.Last(); err != nil {
		return err
	}
	for _, h := range done {
		sr.next = max(sr.next, h.id)
	}
	sr.next++
	if err := sr.finish(ctx, entries, done, report); err != nil {
		return err
	}
	for _, g := range groups {
		if done[g[0].Offset].action == "replaying" {
			continue // finished above
		}
		if err := sr.replay(ctx, g, 0, report); err != nil {
			return fmt.Errorf("replay %s: %w", g[0].ID, err)
		}
	}
	return nil
}

// streamReplay is one ReplayStream's producer, rows and next publishing id.
type streamReplay struct {
	cfg  StreamConfig
	r    *streampub.Replayer
	rows *rows
	next int64
}

// finish sends again the replays a kill cut short, each with its recorded id, in the order of the ids.
func (sr *streamReplay) finish(ctx context.Context, entries []streampub.ParkEntry, done map[int64]handled, report func(Outcome)) error {
	byID := map[string][]*streampub.ParkEntry{}
	for i := range entries {
		e := &entries[i]
		if h := done[e.Offset]; h.action == "replaying" {
			byID[e.ID] = append(byID[e.ID], e)
		}
	}
	groups := slices.Collect(maps.Values(byID))
	slices.SortFunc(groups, func(x, y []*streampub.ParkEntry) int { return cmp.Compare(done[x[0].Offset].id, done[y[0].Offset].id) })
	for _, g := range groups {
		if err := sr.replay(ctx, g, done[g[0].Offset].id, report); err != nil {
			return fmt.Errorf("finish the replay of %s: %w", g[0].ID, err)
		}
	}
	return nil
}

// replay publishes the row of g with publishing id, or the next one if 0, and records it.
func (sr *streamReplay) replay(ctx context.Context, g []*streampub.ParkEntry, id int64, report func(Outcome)) error {
	e := g[0]
	o := Outcome{ID: e.ID, Copies: len(g), Action: "replayed", Source: "parked copy"}
	m, found, err := sr.rows.read(ctx, e.Table, e.ID, e.CreatedAt)
	switch {
	case decoder.IsBadRow(err):
		var de *decoder.Error
		errors.As(err, &de)
		return sr.parkAgain(ctx, g, &de.Partial, err, o, report)
	case err != nil:
		return err
	case found:
		o.Source = "table row"
		m.CommitTime = e.Message().CommitTime // the row's, which the table does not hold
	default:
		m = e.Message()
		if err := fromCopy(m, true, len(e.Body) == 0 && e.Size > 0, e.Size); err != nil {
			return sr.parkAgain(ctx, g, &m, err, o, report)
		}
	}
	if id == 0 { // a replay cut short goes on: it may be in the stream already
		if later, err := notYet(ctx, sr.rows, &m, &o); err != nil || later {
			if later {
				report(o)
			}
			return err
		}
	}
	if id == 0 {
		id = sr.next
		sr.next++
		if err := mark(ctx, sr.cfg, g, "replaying", id); err != nil {
			return err
		}
	}
	err = sr.r.Send(ctx, &m, id)
	if errors.Is(err, wire.ErrUnpublishable) {
		m.Payload = nil // too large for the park stream's frame too
		return sr.parkAgain(ctx, g, &m, err, o, report)
	}
	if err != nil {
		return err
	}
	killpoint.Hit("parked.stored")
	if err := mark(ctx, sr.cfg, g, "replayed", id); err != nil {
		return err
	}
	report(o)
	return nil
}

// parkAgain parks m again into the park stream with why, and records g as parked again.
func (sr *streamReplay) parkAgain(ctx context.Context, g []*streampub.ParkEntry, m *wire.Message, why error, o Outcome, report func(Outcome)) error {
	e := g[0]
	again := &wire.Parked{Message: *m, Reason: why.Error(), Table: e.Table, LSN: e.LSN, Database: cmp.Or(e.Database, sr.cfg.Database)}
	if len(m.Payload) == 0 {
		again.Size = e.Size
	}
	if err := sr.r.Park(ctx, again); err != nil {
		return fmt.Errorf("park again: %w", err)
	}
	if err := mark(ctx, sr.cfg, g, "parked again", 0); err != nil {
		return err
	}
	o.Action, o.Reason = "parked again", why.Error()
	report(o)
	return nil
}
