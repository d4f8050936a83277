package replay

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/republish"
	"github.com/walbox/walbox/wire"
)

// Replay is one replay: Open it, Run it, Close it.
type Replay struct {
	cfg     Config
	conn    *pgx.Conn
	store   *store
	tables  []*table
	records []progress // per table, as read at Open
	plan    Plan
}

// Plan is what Open found: the replay, whether it resumes, and how many rows it matches.
type Plan struct {
	ID     string // the hash of the tables and the filter
	Filter string // the filter in words
	// Resumed: an earlier run of the same replay recorded progress, and this one goes on from it.
	Resumed bool
	// Matched counts the rows the replay chooses, as the tables hold them now. Sent counts those
	// an earlier run had confirmed. Left counts those after its progress, which this run sends.
	Matched, Sent, Left int64
	// TimeSource says what --since and --until compare: "commit time", "created_at" or
	// "commit time, else created_at". It is "" without a time filter.
	TimeSource string
}

// Open connects, checks the tables and the filter, and finds or records the replay's progress.
// It holds the replay's lock until Close.
func Open(ctx context.Context, cfg Config) (*Replay, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	conn, err := republish.Connect(ctx, cfg.DatabaseURL, "walbox replay")
	if err != nil {
		return nil, err
	}
	r := &Replay{cfg: cfg, conn: conn}
	if err := r.open(ctx); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *Replay) open(ctx context.Context) error {
	cfg := r.cfg
	if _, err := r.conn.Exec(ctx, "SELECT pg_catalog.set_config('client_connection_check_interval', $1::pg_catalog.text, false)",
		strconv.FormatInt(clientCheck.Milliseconds(), 10)); err != nil {
		return fmt.Errorf("set client_connection_check_interval: %w", err)
	}
	r.store = &store{conn: r.conn, table: pgx.Identifier{cfg.Table.Schema, ProgressTable}.Sanitize(), id: cfg.id()}
	r.plan = Plan{ID: r.store.id, Filter: cfg.Filter.String()}
	commitTime, err := r.tracksCommitTime(ctx)
	if err != nil {
		return err
	}
	if cfg.Filter.timed() {
		r.plan.TimeSource = "created_at"
		if commitTime {
			r.plan.TimeSource = "commit time, else created_at"
		}
	}
	dec := decoder.New(cfg.Mappings...)
	for _, m := range cfg.Mappings {
		t, err := newTable(ctx, r.conn, dec, m, cfg.Publication, cfg.Filter, commitTime)
		if err != nil {
			return err
		}
		t.index = len(r.tables)
		r.tables = append(r.tables, t)
	}
	if err := r.store.ensureTable(ctx, cfg.Table.Schema); err != nil {
		return err
	}
	if err := r.store.lock(ctx); err != nil {
		return err
	}
	return r.progress(ctx)
}

// tracksCommitTime reports whether the server keeps commit times (track_commit_timestamp).
func (r *Replay) tracksCommitTime(ctx context.Context) (bool, error) {
	var on string
	if err := r.conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('track_commit_timestamp')").Scan(&on); err != nil {
		return false, fmt.Errorf("read track_commit_timestamp: %w", err)
	}
	return on == "on", nil
}

// progress reads the replay's progress on each table, or records its start, and counts the rows.
func (r *Replay) progress(ctx context.Context) error {
	names := make([]string, len(r.tables))
	r.records = make([]progress, len(r.tables))
	found := false
	for i, t := range r.tables {
		names[i] = t.mapping.Table.String()
		p, err := r.store.read(ctx, names[i])
		if err != nil {
			return err
		}
		r.records[i], found = p, found || p.found
	}
	if !found {
		start, err := r.store.start(ctx, names, r.plan.Filter)
		if err != nil {
			return err
		}
		for i := range r.records {
			r.records[i] = start
		}
	}
	r.plan.Resumed = found
	for i, t := range r.tables {
		p := &r.records[i]
		if !p.found { // a table added to the replay's tables: none is, they name it
			return fmt.Errorf("replay %s has no progress recorded for table %s", r.plan.ID, t.mapping.Table)
		}
		matched, err := r.count(ctx, t, *p, cursor{k: 0, c: -1, t: firstTID})
		if err != nil {
			return err
		}
		left, err := r.count(ctx, t, *p, cursor{k: p.doneXID, c: p.doneCmd, t: lastTID})
		if err != nil {
			return err
		}
		r.plan.Matched += matched
		r.plan.Left += left
		r.plan.Sent += p.sent
	}
	return nil
}

// Plan returns what Open found.
func (r *Replay) Plan() Plan { return r.plan }

// Close closes the connection, which releases the replay's lock.
func (r *Replay) Close() { _ = r.conn.Close(context.Background()) }

// Progress is where a running replay is: rows confirmed (earlier runs' too) of those matched.
type Progress struct {
	Sent, Matched int64
	Table         wire.Table // the table it reads
}

// Result is what Run did.
type Result struct {
	Sent      int64 // rows this run published or parked, each confirmed
	Published int64
	Parked    int64
	Duration  time.Duration
}

// Run publishes the rows left, each table in turn, at most at the rate. Once every row is
// confirmed, it deletes the replay's progress. It calls report, unless nil, about once a second.
func (r *Replay) Run(ctx context.Context, report func(Progress)) (Result, error) {
	start := time.Now()
	pub, err := r.cfg.Dial(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("connect to broker: %w", err)
	}
	rp := republish.New(pub, r.cfg.Dial, r.cfg.OnParked)
	defer func() { _ = rp.Close() }()
	if rp.Database, err = inspect.Database(ctx, r.conn); err != nil {
		return Result{}, err
	}
	run := &run{Replay: r, pub: rp, pace: pacer{rate: r.cfg.Rate}, report: report, sent: r.plan.Sent}
	for i, t := range r.tables {
		if err := run.table(ctx, t, r.records[i]); err != nil {
			return run.result(start), err
		}
	}
	if err := r.store.finish(ctx); err != nil {
		return run.result(start), err
	}
	return run.result(start), nil
}
