package checker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/outbox"
)

// WriterConfig configures a Writer. The zero value of every field but DatabaseURL selects its
// default.
type WriterConfig struct {
	// DatabaseURL is the database holding the outbox table. Required.
	DatabaseURL string
	// Table is the outbox table (default public.outbox). The Writer fills id, aggregate_type,
	// aggregate_id, event_type and payload; the other columns keep their defaults.
	Table outbox.Table
	// Name tells writers sharing a table apart: it prefixes the aggregate names and is mixed into
	// the seed of the ids (default "agg").
	Name string
	// Seed makes the workload reproducible: transaction sizes, aggregates and ids.
	Seed uint64
	// Aggregates is how many aggregates rows are spread over (default 8).
	Aggregates int
	// MaxTx is the largest transaction Run writes; sizes are uniform in [1, MaxTx] (default 20).
	MaxTx int
	// EventType is every row's event type, hence the routing key (default "checker.event").
	EventType string
	// Pause is the wait between transactions in Run (default none).
	Pause time.Duration
	// MaxRows ends Run once this many rows committed (default: no limit; ctx ends Run).
	MaxRows int
	// Pad adds this many bytes of filler to each payload.
	Pad int
	// Emit is the share of rows written as messages without a row, through the emit function
	// (outbox.EmitFunction) in the table's schema, mixed with table rows in the same transactions
	// (default 0: every row in the table).
	Emit float64
	// Rollback is the share of transactions rolled back on purpose after writing (default 0).
	Rollback float64
	// Columns names the table's id, aggregate type, aggregate id, event type and payload columns,
	// in that order, for a table mapped in walbox's config file (default the outbox contract's).
	Columns []string
	// Logf, if set, receives a line for each failed transaction and reconnect.
	Logf func(format string, args ...any)
}

func (c *WriterConfig) defaults() error {
	if c.DatabaseURL == "" {
		return errors.New("checker: writer: database url required")
	}
	if c.Table == (outbox.Table{}) {
		c.Table = outbox.DefaultTable
	}
	if c.Name == "" {
		c.Name = "agg"
	}
	if c.Aggregates <= 0 {
		c.Aggregates = 8
	}
	if c.MaxTx <= 0 {
		c.MaxTx = 20
	}
	if c.EventType == "" {
		c.EventType = "checker.event"
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if len(c.Columns) == 0 {
		c.Columns = []string{outbox.ColID, outbox.ColAggregateType, outbox.ColAggregateID, outbox.ColEventType, outbox.ColPayload}
	}
	if len(c.Columns) != 5 {
		return errors.New("checker: writer: columns: want id, aggregate type, aggregate id, event type and payload")
	}
	return nil
}

// WriterStats counts what a Writer did.
type WriterStats struct {
	Transactions int // committed transactions
	Rows         int // committed rows
	Failed       int // transactions known not to have committed
	RolledBack   int // of those, rolled back on purpose
	Unknown      int // commits whose outcome was unknown when they returned
	Resolved     int // of those, found committed in the table afterwards
	Unresolved   int // rows of commits whose outcome is still unknown
	Reconnects   int
}

// Writer commits outbox rows and records which ones committed. Run and Tx must be called from one
// goroutine at a time; Committed, Stats and Unresolved may be called from any.
type Writer struct {
	cfg     WriterConfig
	rng     *rand.Rand // sizes and aggregates
	ids     *rand.Rand // row ids
	seqs    map[string]int64
	conn    *pgx.Conn
	columns []string

	mu        sync.Mutex
	committed []Row
	pending   [][]Row // transactions whose commit outcome is unknown
	stats     WriterStats
}

// NewWriter returns a Writer; it connects on first use.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	h := fnv.New64a()
	h.Write([]byte(cfg.Name))
	return &Writer{
		cfg:     cfg,
		rng:     rand.New(rand.NewPCG(cfg.Seed, 0x77616c626f78)),
		ids:     rand.New(rand.NewPCG(cfg.Seed, h.Sum64())),
		seqs:    map[string]int64{},
		columns: cfg.Columns,
	}, nil
}

// Run commits transactions of random size until ctx ends or MaxRows rows committed. Failed
// transactions are logged and the Writer reconnects, so it rides out server restarts. It returns
// nil when ctx ends or the rows are written.
func (w *Writer) Run(ctx context.Context) error {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		if w.cfg.MaxRows > 0 && w.Stats().Rows >= w.cfg.MaxRows {
			return nil
		}
		n := 1 + w.rng.IntN(w.cfg.MaxTx)
		if w.cfg.MaxRows > 0 {
			n = min(n, w.cfg.MaxRows-w.Stats().Rows)
		}
		err := w.Tx(ctx, n)
		if errors.Is(err, errRolledBack) {
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				w.cfg.Logf("checker: writer: %v (retrying in %v)", err, backoff)
			}
			sleep(ctx, backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		if w.cfg.Pause > 0 {
			sleep(ctx, w.cfg.Pause)
		}
	}
	return nil
}

// Tx commits one transaction of n rows. An error means the rows did not commit (among them a
// transaction rolled back on purpose, see WriterConfig.Rollback), or that the outcome is unknown
// and will be resolved by a later Tx or Flush.
func (w *Writer) Tx(ctx context.Context, n int) error { return w.tx(ctx, n, nil) }

// TxMixed commits one transaction of len(emitted) rows, the i-th written through the emit
// function if emitted[i] is true, whatever WriterConfig.Emit says: a test places an emitted
// message right beside a table row. It never rolls back on purpose; other errors are as for Tx.
func (w *Writer) TxMixed(ctx context.Context, emitted ...bool) error {
	return w.tx(ctx, len(emitted), emitted)
}

// tx commits n rows; emitted, if not nil, says which are written through the emit function.
func (w *Writer) tx(ctx context.Context, n int, emitted []bool) error {
	if err := w.ensureConn(ctx); err != nil {
		return err
	}
	if err := w.resolvePending(ctx); err != nil {
		return err
	}
	rows := w.next(n)
	for i, e := range emitted {
		rows[i].Emitted = e
	}
	err := w.insert(ctx, rows, emitted == nil)
	if err == nil {
		w.record(rows)
	}
	return err
}

// next assigns ids, aggregates and sequence numbers to n new rows.
func (w *Writer) next(n int) []Row {
	rows := make([]Row, n)
	for i := range rows {
		agg := fmt.Sprintf("%s-%d", w.cfg.Name, w.rng.IntN(w.cfg.Aggregates))
		w.seqs[agg]++
		rows[i] = Row{ID: w.newID(), Aggregate: agg, Seq: w.seqs[agg]}
		if w.cfg.Emit > 0 {
			rows[i].Emitted = w.rng.Float64() < w.cfg.Emit
		}
	}
	return rows
}

// newID returns a version 4 UUID drawn from the seeded generator.
func (w *Writer) newID() string {
	var u uuid.UUID
	binary.LittleEndian.PutUint64(u[:8], w.ids.Uint64())
	binary.LittleEndian.PutUint64(u[8:], w.ids.Uint64())
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u.String()
}

type payload struct {
	Aggregate string `json:"aggregate"`
	Seq       int64  `json:"seq"`
	Pad       string `json:"pad,omitempty"`
}

// insert writes rows in one transaction, rolled back on purpose as WriterConfig.Rollback says if
// mayRollBack. COMMIT runs on a context of its own, so that the end of ctx does not make its
// outcome unknown.
func (w *Writer) insert(ctx context.Context, rows []Row, mayRollBack bool) error {
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		return w.broken(fmt.Errorf("begin: %w", err))
	}
	pad := strings.Repeat("x", w.cfg.Pad)
	values := make([][]any, len(rows))
	for i, r := range rows {
		body, err := json.Marshal(payload{Aggregate: r.Aggregate, Seq: r.Seq, Pad: pad})
		if err != nil {
			return err
		}
		values[i] = []any{r.ID, "checker", r.Aggregate, w.cfg.EventType, string(body)}
	}
	if w.cfg.Emit > 0 || w.cfg.Rollback > 0 || slices.ContainsFunc(rows, func(r Row) bool { return r.Emitted }) {
		err = w.writeMixed(ctx, tx, rows, values)
	} else {
		table := pgx.Identifier{w.cfg.Table.Schema, w.cfg.Table.Name}
		if _, err = tx.CopyFrom(ctx, table, w.columns, pgx.CopyFromRows(values)); err != nil {
			err = fmt.Errorf("copy %d rows: %w", len(rows), err)
		}
	}
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		w.fail()
		return w.broken(err)
	}
	if mayRollBack && w.cfg.Rollback > 0 && w.rng.Float64() < w.cfg.Rollback {
		w.mu.Lock()
		w.stats.RolledBack++
		w.mu.Unlock()
		w.fail()
		if err := tx.Rollback(ctx); err != nil {
			return w.broken(fmt.Errorf("rollback: %w", err))
		}
		return errRolledBack
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err = tx.Commit(cctx)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pgErr), errors.Is(err, pgx.ErrTxCommitRollback):
		w.fail() // the server answered: rolled back
		return fmt.Errorf("commit: %w", err)
	}
	// No answer: the transaction may or may not have committed. Look it up later.
	w.mu.Lock()
	w.pending = append(w.pending, rows)
	w.stats.Unknown++
	w.mu.Unlock()
	return w.broken(fmt.Errorf("commit of %d rows, outcome unknown: %w", len(rows), err))
}

// errRolledBack is Tx's answer for a transaction rolled back on purpose.
var errRolledBack = errors.New("rolled back on purpose")

// writeMixed writes each row as an insert or, if it is Emitted, a call of the emit function, in
// order, in one round trip. It records the transaction id in the rows: emitted rows leave nothing
// in the table to look up, so an unknown commit is resolved by the transaction's status instead.
func (w *Writer) writeMixed(ctx context.Context, tx pgx.Tx, rows []Row, values [][]any) error {
	insert := "INSERT INTO " + w.cfg.Table.Quoted() + " (" + strings.Join(w.columns, ", ") + ") VALUES ($1, $2, $3, $4, $5)"
	emit := "SELECT " + w.cfg.Table.EmitFunction() + "($2, $3, $4, $5::jsonb, '{}', $1::uuid)"
	b := &pgx.Batch{}
	b.Queue("SELECT pg_current_xact_id()::text::bigint")
	for i, r := range rows {
		if r.Emitted {
			b.Queue(emit, values[i]...)
		} else {
			b.Queue(insert, values[i]...)
		}
	}
	br := tx.SendBatch(ctx, b)
	var xid int64
	if err := br.QueryRow().Scan(&xid); err != nil {
		br.Close() //nolint:errcheck // the first error is the one to report
		return fmt.Errorf("transaction id: %w", err)
	}
	for range rows {
		if _, err := br.Exec(); err != nil {
			br.Close() //nolint:errcheck // the first error is the one to report
			return fmt.Errorf("write %d rows: %w", len(rows), err)
		}
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("write %d rows: %w", len(rows), err)
	}
	for i := range rows {
		rows[i].xid = xid
	}
	return nil
}

func (w *Writer) fail() {
	w.mu.Lock()
	w.stats.Failed++
	w.mu.Unlock()
}

// broken drops the connection when err left it unusable.
func (w *Writer) broken(err error) error {
	if w.conn != nil && (w.conn.IsClosed() || w.conn.PgConn().IsBusy() || !isServerError(err)) {
		_ = w.conn.Close(context.Background())
		w.conn = nil
	}
	return err
}

func isServerError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

func (w *Writer) record(rows []Row) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.committed = append(w.committed, rows...)
	w.stats.Transactions++
	w.stats.Rows += len(rows)
}

func (w *Writer) ensureConn(ctx context.Context) error {
	if w.conn != nil && !w.conn.IsClosed() {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, w.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	w.conn = conn
	w.mu.Lock()
	w.stats.Reconnects++
	w.mu.Unlock()
	return nil
}

// resolvePending looks up every transaction whose commit outcome is unknown: all of its ids in
// the table means it committed, none means it did not; one that wrote messages without rows is
// looked up by its transaction id.
func (w *Writer) resolvePending(ctx context.Context) error {
	w.mu.Lock()
	pending := w.pending
	w.mu.Unlock()
	for len(pending) > 0 {
		rows := pending[0]
		committed, err := w.lookup(ctx, rows)
		if err != nil {
			return w.broken(fmt.Errorf("resolve unknown commit: %w", err))
		}
		w.mu.Lock()
		w.pending = w.pending[1:]
		if committed {
			w.committed = append(w.committed, rows...)
			w.stats.Transactions++
			w.stats.Rows += len(rows)
			w.stats.Resolved++
		}
		pending = w.pending
		w.mu.Unlock()
		w.cfg.Logf("checker: writer: unknown commit of %d rows resolved: committed=%t", len(rows), committed)
	}
	return nil
}

func (w *Writer) lookup(ctx context.Context, rows []Row) (bool, error) {
	if xid := rows[0].xid; xid != 0 {
		return w.xactCommitted(ctx, xid)
	}
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		id, err := uuid.Parse(r.ID)
		if err != nil {
			return false, err
		}
		ids[i] = id
	}
	table := pgx.Identifier{w.cfg.Table.Schema, w.cfg.Table.Name}.Sanitize()
	var n int
	err := w.conn.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE "+pgx.Identifier{w.columns[0]}.Sanitize()+" = ANY($1)", ids).Scan(&n)
	switch {
	case err != nil:
		return false, err
	case n == len(ids):
		return true, nil
	case n == 0:
		return false, nil
	}
	return false, fmt.Errorf("transaction half committed: %d of %d rows in the table", n, len(ids))
}

// xactCommitted asks the server how the transaction xid ended.
func (w *Writer) xactCommitted(ctx context.Context, xid int64) (bool, error) {
	var status *string
	if err := w.conn.QueryRow(ctx, "SELECT pg_xact_status($1::text::xid8)", xid).Scan(&status); err != nil {
		return false, err
	}
	switch {
	case status == nil:
		return false, fmt.Errorf("transaction %d is too old for its status to be known", xid)
	case *status == "committed":
		return true, nil
	case *status == "aborted":
		return false, nil
	}
	return false, fmt.Errorf("transaction %d is still %s", xid, *status)
}

// Flush resolves every commit whose outcome is unknown, retrying until ctx ends, and closes the
// connection.
func (w *Writer) Flush(ctx context.Context) error {
	defer w.Close()
	for {
		err := w.ensureConn(ctx)
		if err == nil {
			err = w.resolvePending(ctx)
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("checker: writer: flush: %w", err)
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// Close closes the connection; unknown outcomes stay unresolved.
func (w *Writer) Close() {
	if w.conn != nil {
		_ = w.conn.Close(context.Background())
		w.conn = nil
	}
}

// Committed returns a copy of the rows known to have committed, in commit order.
func (w *Writer) Committed() []Row {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Row(nil), w.committed...)
}

// Stats returns the Writer's counters.
func (w *Writer) Stats() WriterStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	for _, rows := range w.pending {
		s.Unresolved += len(rows)
	}
	return s
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
