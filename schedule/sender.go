package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/wire"
)

// Defaults of a Sender.
const (
	// DefaultBatch is how many due messages one transaction sends.
	DefaultBatch = 500
	// DefaultPoll bounds the wait for the next due message. A message recorded meanwhile with an
	// earlier deliver_at is seen within it, or at once through Nudge.
	DefaultPoll = 500 * time.Millisecond
	// DoneRetention is how long walbox_schedule_done keeps a sent id. It keeps a cancelled one at least
	// that long, and until every slot read past it.
	DoneRetention = 7 * 24 * time.Hour
)

// confirmTimeout bounds the wait for a batch's confirms. The batch is sent again after it.
const confirmTimeout = time.Minute

// standbyLook is how often a sender whose relay does not hold the slot looks again. A look reads
// one flag, so a takeover sends at once.
const standbyLook = 100 * time.Millisecond

// shutdownGrace bounds how long a stop waits for the batch being sent: its confirms and its commit.
// Without it, a stop would leave that batch to be sent again.
const shutdownGrace = 5 * time.Second

// finishing returns a context that ends grace after ctx ends, and a function that releases it.
func finishing(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	fin, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-ctx.Done():
		case <-fin.Done():
			return
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-fin.Done():
		}
	}()
	return fin, cancel
}

// Retries after an error start at minRetry and double up to maxRetry. After a database restart the
// sender is back within maxRetry of the server.
const (
	minRetry = 100 * time.Millisecond
	maxRetry = 2 * time.Second
)

// SenderConfig configures a Sender.
type SenderConfig struct {
	// DatabaseURL is the primary's: the schedule is written there.
	DatabaseURL string
	// Schema is the registry's schema, where the schedule is.
	Schema string
	// Slot is the relay's slot: the sender sends its messages, and those of retired slots.
	Slot string
	// Dial opens a publishing session of the sender's own.
	Dial func(context.Context) (wire.Publisher, error)
	// Active reports whether the relay holds the slot now. Only then does the sender send.
	Active func() bool
	Logger *slog.Logger
	// Batch and Poll default to DefaultBatch and DefaultPoll.
	Batch int
	Poll  time.Duration
	// Lateness, unless nil, learns how late each sent message left: its confirm less its deliver_at.
	Lateness func(time.Duration)
}

// Sender sends the due messages of the schedule. The zero value is not usable: call NewSender.
type Sender struct {
	cfg   SenderConfig
	t     tables
	nudge chan struct{}
	// Waiting is the number of messages in the schedule, read every few seconds (every slot's).
	Waiting atomic.Int64
	// Sent counts the messages sent, and Cancelled those dropped for a cancel.
	Sent, Cancelled atomic.Int64

	conn      *pgx.Conn
	spare     [pipeline - 1]*pgx.Conn // the connections of the batches sent beside conn's
	db        string                  // the database, as parked copies name it (wire.ParkedBy)
	pub       wire.Publisher
	lastCount time.Time
	lastPrune time.Time
	// spareFailed is when the sender last failed to connect for the next batch.
	spareFailed time.Time
	// alone counts the turns left that send one message each. The broker refused one of a batch
	// for its size: they find which. Sent alone, it is parked without its payload.
	alone int
}

// NewSender returns a Sender, its defaults filled in.
func NewSender(cfg SenderConfig) *Sender {
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sender{cfg: cfg, t: tablesIn(cfg.Schema), nudge: make(chan struct{}, 1)}
}

// Nudge tells the sender that a message was recorded. It looks at the schedule again at once.
func (s *Sender) Nudge(time.Time) {
	select {
	case s.nudge <- struct{}{}:
	default:
	}
}

// Run sends due messages until ctx ends. Errors are logged and retried after a pause; it returns
// nil when ctx ends.
func (s *Sender) Run(ctx context.Context) error {
	defer s.release()
	wait, retry := time.Duration(0), time.Duration(0)
	for {
		if !s.sleep(ctx, wait) {
			return nil
		}
		if !s.cfg.Active() {
			s.release() // a standby holds no session
			wait = standbyLook
			continue
		}
		next, err := s.turn(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			retry = min(max(2*retry, minRetry), maxRetry)
			s.cfg.Logger.Warn("scheduled delivery: will retry", "error", err, "retry_in", retry)
			s.release()
			wait = retry
			continue
		}
		wait, retry = next, 0
	}
}

// sleep waits d, or less if nudged; false when ctx ended.
func (s *Sender) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-s.nudge:
	}
	return true
}

// turn sends the due messages, and returns how long to wait before the next turn.
func (s *Sender) turn(ctx context.Context) (time.Duration, error) {
	if err := s.open(ctx); err != nil {
		return 0, err
	}
	s.housekeep(ctx)
	n, held, err := s.sendDue(ctx)
	if err != nil {
		return 0, err
	}
	if held {
		return s.cfg.Poll, nil // an open cancel holds a due message: look again after a pause
	}
	if n == s.cfg.Batch {
		return 0, nil // more may be due
	}
	var next *float64
	err = s.conn.QueryRow(ctx, "SELECT pg_catalog.date_part('epoch', pg_catalog.min(deliver_at) OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()) FROM "+
		s.t.schedule+" WHERE slot_name OPERATOR(pg_catalog.=) $1::pg_catalog.text", s.cfg.Slot).Scan(&next)
	if err != nil {
		return 0, fmt.Errorf("read the next due time: %w", err)
	}
	if next == nil {
		return s.cfg.Poll, nil
	}
	return min(max(time.Duration(*next*float64(time.Second)), 0), s.cfg.Poll), nil
}

// open connects to the database, unless connected.
func (s *Sender) open(ctx context.Context) error {
	if s.conn == nil {
		c, err := pgconnect.Connect(ctx, s.cfg.DatabaseURL)
		if err != nil {
			return fmt.Errorf("connect to the database: %w", err)
		}
		if s.db, err = inspect.Database(ctx, c); err != nil {
			_ = c.Close(ctx)
			return err
		}
		if err := s.migrated(ctx, c); err != nil {
			_ = c.Close(ctx)
			return err
		}
		s.conn = c
	}
	return nil
}

// errNotMigrated is why a sender sends nothing on a schema before migration 018.
var errNotMigrated = errors.New("walbox_schedule_done has no column sent_by: run walbox migrate")

// migrated refuses a schema without walbox_schedule_done.sent_by (migration 018). A batch notes its
// sent messages there only after the broker's confirms. Without the column, each retry would send it again.
func (s *Sender) migrated(ctx context.Context, c *pgx.Conn) error {
	var ok bool
	if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) $1::pg_catalog.regclass"+
		" AND a.attname OPERATOR(pg_catalog.=) 'sent_by' AND NOT a.attisdropped)", s.t.done).Scan(&ok); err != nil {
		return fmt.Errorf("read the columns of %s: %w", s.t.done, err)
	}
	if !ok {
		return errNotMigrated
	}
	return nil
}

// dial opens the sender's broker session, unless open. The sender dials only once a message is
// due, so a relay with an empty schedule keeps one broker session.
func (s *Sender) dial(ctx context.Context) error {
	if s.pub != nil {
		return nil
	}
	p, err := s.cfg.Dial(ctx)
	if err != nil {
		return fmt.Errorf("connect to the broker: %w", err)
	}
	s.pub = p
	return nil
}

// release closes the sender's connections.
func (s *Sender) release() {
	if s.pub != nil {
		_ = s.pub.Close()
		s.pub = nil
	}
	for _, c := range append([]*pgx.Conn{s.conn}, s.spare[:]...) {
		if c != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = c.Close(ctx)
			cancel()
		}
	}
	s.conn, s.spare = nil, [pipeline - 1]*pgx.Conn{}
}

// housekeep counts the schedule every few seconds, and prunes old done rows every hour. Failures
// are only logged: sending goes on.
func (s *Sender) housekeep(ctx context.Context) {
	now := time.Now()
	if now.Sub(s.lastCount) >= 5*time.Second {
		s.lastCount = now
		var n int64
		if err := s.conn.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM "+s.t.schedule).Scan(&n); err != nil {
			s.cfg.Logger.Warn("scheduled delivery: count the schedule", "error", err)
		} else {
			s.Waiting.Store(n)
		}
	}
	if now.Sub(s.lastPrune) >= time.Hour {
		s.lastPrune = now
		// The stamp goes first. The prune deletes a tombstone once each slot passed its stamp.
		if _, err := s.conn.Exec(ctx, s.t.stampSQL(), DoneRetention.Seconds()); err != nil {
			s.cfg.Logger.Warn("scheduled delivery: stamp the tombstones of "+s.t.done, "error", err)
		}
		if err := s.prune(ctx); err != nil {
			s.cfg.Logger.Warn("scheduled delivery: prune "+s.t.done, "error", err)
		}
	}
}

// prune deletes the done rows pruneSQL names. A tombstone stays while a record of its id waits: one
// written by a record that raced the cancel.
//
// It locks walbox_schedule first, as a batch, a record and a cancel do. The DELETE alone takes
// walbox_schedule_done first. It then deadlocked a migration that locked the schedule and altered
// the done table.
func (s *Sender) prune(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "LOCK TABLE "+s.t.schedule+" IN ACCESS SHARE MODE"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, s.t.pruneSQL(), DoneRetention.Seconds())
		return err
	})
}

// pipeline is how many connections the sender sends over. Batch k runs on connection k mod pipeline.
// The next batch is read and published while the confirms of the one before come back. A batch's
// delete and commit overlap the batches after it.
const pipeline = 3

// flight is a batch on its way: read and locked in its transaction, published, awaiting confirms.
type flight struct {
	tx      pgx.Tx // nil when nothing was published: an open cancel held every row
	locked  int
	held    bool
	sent    *batchSent
	cancels keys
	err     error      // why publishing stopped early
	done    chan error // the outcome of its commit, once committing
}

// sendDue sends due messages, a batch per transaction, until fewer than a full batch are due. Each
// batch locks its due rows and drops the cancelled ones. It publishes the rest in order and awaits
// every verdict. Then it deletes the cancelled and the confirmed ones, and notes the sent ones. A
// refused message stays for the retry, alone: those confirmed beside it are not sent again.
//
// Batches overlap: the next is read and published before the confirms of the one before arrive. All
// go through one session, so they leave in deliver_at order. A batch commits only after each of its
// own confirms. It returns how many rows the last batch locked, and whether an open cancel held any.
func (s *Sender) sendDue(ctx context.Context) (int, bool, error) {
	// A stop ends the publishing. What was published is still confirmed, deleted and committed.
	fin, finished := finishing(ctx, shutdownGrace)
	defer finished()
	committing := make(map[int]*flight) // commits under way, by connection
	settle := func(i int) error {
		f := committing[i]
		if f == nil {
			return nil
		}
		delete(committing, i)
		return <-f.done
	}
	settleAll := func() error {
		var errs error
		for i := range pipeline {
			errs = errors.Join(errs, settle(i))
		}
		return errs
	}
	cur, err := s.begin(ctx, 0, false)
	if cur == nil {
		return 0, false, err
	}
	locked, held := 0, false
	for i := 0; ; i = (i + 1) % pipeline {
		locked, held = cur.locked, held || cur.held
		var next *flight
		var nerr error
		// A row an open cancel holds stays locked by cur, so the next batch passes it. A batch of
		// held rows only locked nothing: the next would read them again.
		if cur.err == nil && cur.tx != nil && cur.locked == s.cfg.Batch && s.alone == 0 && ctx.Err() == nil && s.cfg.Active() {
			j := (i + 1) % pipeline
			if nerr = settle(j); nerr == nil {
				next, nerr = s.begin(ctx, j, true)
			}
			if next == nil && nerr == nil {
				locked = 0 // nothing more is due
			}
		}
		refused := s.awaitFlight(fin, cur, next)
		later := 0 // published after cur: a session's close for size may be any of theirs too
		if next != nil {
			later = next.sent.sent
		}
		if refused != nil && next != nil {
			// The session may be gone, and tooLarge dials another: the next batch settles first.
			nerr = errors.Join(nerr, s.commit(fin, next, s.awaitFlight(fin, next, nil)))
			next = nil
		}
		if refused != nil && errors.As(refused, new(*wire.TooLargeError)) {
			refused = s.tooLarge(fin, cur.sent, later, refused)
		} else if refused == nil && s.alone > 0 {
			s.alone--
		}
		if refused != nil {
			return 0, false, errors.Join(s.commit(fin, cur, refused), nerr, settleAll())
		}
		cur.done = make(chan error, 1)
		committing[i] = cur
		go func(f *flight) { f.done <- s.commit(fin, f, nil) }(cur)
		if next == nil {
			if err := errors.Join(nerr, settleAll()); err != nil {
				return 0, false, err
			}
			return locked, held, nil
		}
		cur = next
	}
}

// connAt returns the sender's connection i, connecting it if need be.
func (s *Sender) connAt(ctx context.Context, i int) (*pgx.Conn, error) {
	if i == 0 {
		return s.conn, nil
	}
	if s.spare[i-1] == nil {
		c, err := pgconnect.Connect(ctx, s.cfg.DatabaseURL)
		if err != nil {
			return nil, fmt.Errorf("connect to the database: %w", err)
		}
		s.spare[i-1] = c
	}
	return s.spare[i-1], nil
}

// spareRetry is how long the batches go one at a time once a connection for the next one failed.
// The sender neither tries nor warns again meanwhile.
const spareRetry = time.Minute

// pipelineLockWait bounds the wait of a batch read beside another batch for a table lock. That
// other batch holds its locks until its confirms are in. A lock queued between the two waits for
// it: a migration's, say. The read waits behind that lock, and the confirms would wait for the read.
const pipelineLockWait = time.Second

// keptLockTimeout keeps lock_timeout, as it was before pipelineLockWait, until the transaction ends.
const keptLockTimeout = "walbox.lock_timeout"

// begin reads and locks a batch of due messages in a transaction on connection i, and publishes it.
// It returns nil when none is due. Beside another batch, it waits at most pipelineLockWait for a
// table lock, and then returns nil too. So it does when it cannot connect, or its connection failed.
func (s *Sender) begin(ctx context.Context, i int, beside bool) (*flight, error) {
	if beside && i > 0 && s.spare[i-1] == nil && !s.spareFailed.IsZero() && time.Since(s.spareFailed) < spareRetry {
		return nil, nil // each try would cost the server a refused connection
	}
	conn, err := s.connAt(ctx, i)
	if err != nil && beside && ctx.Err() == nil {
		// Out of connections, say: the batches go one at a time, as over a single connection.
		s.spareFailed = time.Now()
		s.cfg.Logger.Warn("scheduled delivery: sending one batch at a time", "error", err, "retry_in", spareRetry)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var opts pgx.TxOptions
	if beside { // in the same round trip; the setting it replaces is kept, for the commit
		opts.BeginQuery = fmt.Sprintf("BEGIN; SELECT pg_catalog.set_config('"+keptLockTimeout+"', pg_catalog.current_setting('lock_timeout'), true),"+
			" pg_catalog.set_config('lock_timeout', '%dms', true)", pipelineLockWait.Milliseconds())
	}
	tx, err := conn.BeginTx(ctx, opts)
	if err != nil && beside && i > 0 && ctx.Err() == nil {
		// A spare connection idle since the last burst may be gone: idle_session_timeout, say. This
		// batch goes alone; the next one connects again.
		s.cfg.Logger.Debug("scheduled delivery: a connection for the next batch failed", "error", err)
		_ = conn.Close(ctx)
		s.spare[i-1] = nil
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	f, err := s.lockAndPublish(ctx, tx, beside)
	if f == nil || f.tx == nil {
		_ = tx.Rollback(ctx)
	}
	var pgErr *pgconn.PgError
	if beside && errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		s.cfg.Logger.Debug("scheduled delivery: the next batch waits for a table lock", "error", err)
		return nil, nil
	}
	return f, err
}

// lockAndPublish is begin within the transaction tx. Beside another batch, the read skips that
// batch's rows, locked.
func (s *Sender) lockAndPublish(ctx context.Context, tx pgx.Tx, beside bool) (*flight, error) {
	limit := s.cfg.Batch
	if s.alone > 0 {
		limit = 1
	}
	rows, err := tx.Query(ctx, s.t.dueSQL(), s.cfg.Slot, limit, cancelLockClass)
	if err != nil {
		return nil, fmt.Errorf("read the schedule: %w", err)
	}
	ds, err := readDue(rows)
	if err != nil || len(ds) == 0 {
		return nil, err
	}
	f := &flight{locked: len(ds), sent: &batchSent{waiting: map[uint64]outgoing{}}}
	ds, f.held = unheld(ds)
	if len(ds) == 0 {
		return f, nil
	}
	ids := make([]string, len(ds))
	for i := range ds {
		ids[i] = ds[i].msg.AMQPMessageID()
	}
	// Read after the lock, so a cancel committed before it is seen.
	// The same query resets lock_timeout, if set, for the commit: it waits as long as it must.
	reset := ""
	if beside {
		reset = ", pg_catalog.set_config('lock_timeout', pg_catalog.current_setting('" + keptLockTimeout + "'), true)"
	}
	var cancelled []string
	dest := []any{&cancelled}
	if beside {
		dest = append(dest, new(string))
	}
	if err := tx.QueryRow(ctx, "SELECT pg_catalog.array_agg(message_id)"+reset+" FROM "+s.t.done+
		" WHERE message_id OPERATOR(pg_catalog.=) ANY($1::pg_catalog.text[]) AND slot_name OPERATOR(pg_catalog.=) '' AND state OPERATOR(pg_catalog.=) 'cancelled'", ids).Scan(dest...); err != nil {
		return nil, fmt.Errorf("read cancels: %w", err)
	}
	f.sent, f.cancels, f.err = s.publish(ctx, ds, cancelled)
	if f.sent == nil {
		return nil, f.err
	}
	f.tx = tx
	return f, nil
}

// awaitFlight waits for the verdicts of f; those of next, published since, go to next. After a
// failed publish, the verdicts already due are taken, but not awaited long. It returns the
// publish's error and the first refusal.
func (s *Sender) awaitFlight(ctx context.Context, f, next *flight) error {
	wctx, waited := ctx, context.CancelFunc(func() {})
	if f.err != nil {
		wctx, waited = context.WithTimeout(ctx, time.Second)
	}
	var later *batchSent
	if next != nil {
		later = next.sent
	}
	refused := s.await(wctx, f.sent, later)
	waited()
	if f.err != nil {
		return errors.Join(f.err, refused)
	}
	return refused
}

// commit deletes the cancelled and the confirmed messages of f, notes the sent ones, and commits.
// A message the broker refused stays; the confirmed ones go, so the retry sends only what failed.
// It returns refused, f's refusal, or why the commit failed. It may run beside the sender's other
// work: it touches only f and its connection.
func (s *Sender) commit(ctx context.Context, f *flight, refused error) error {
	if f.tx == nil {
		return refused
	}
	tx := f.tx
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	sent := f.sent
	if refused != nil && len(sent.confirmed.ids) == 0 && len(f.cancels.ids) == 0 {
		return refused
	}
	killpoint.Hit("schedule.confirmed")
	// The rows are this transaction's, locked since the read: each is where it was read.
	gone := slices.Concat(f.cancels.rows, sent.confirmed.rows)
	// Both statements go in one round trip.
	var b pgx.Batch
	b.Queue("DELETE FROM "+s.t.schedule+" WHERE ctid OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.tid[])", gone)
	b.Queue(s.t.noteSQL(), sent.confirmed.slots, sent.confirmed.ids)
	br := tx.SendBatch(ctx, &b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return fmt.Errorf("delete sent messages: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return fmt.Errorf("note sent messages: %w", err)
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("delete sent messages: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit sent messages: %w", err)
	}
	s.Sent.Add(int64(len(sent.confirmed.ids)))
	s.Cancelled.Add(int64(len(f.cancels.ids)))
	return refused
}

// cancelLockClass is the class of the advisory lock walbox_cancel holds on a message id until its
// transaction ends (migration 016_cancel_lock.sql).
const cancelLockClass = 2002873442

// unheld returns the rows of ds whose cancel lock was free, and whether a cancel held any. A cancel
// still open may commit: its rows wait for a later turn.
func unheld(ds []due) ([]due, bool) {
	n := 0
	for i := range ds {
		if !ds[i].held {
			n++
		}
	}
	if n == len(ds) {
		return ds, false
	}
	out := make([]due, 0, n)
	for i := range ds {
		if !ds[i].held {
			out = append(out, ds[i])
		}
	}
	return out, true
}

// keys are schedule rows by slot, message id and place, side by side.
type keys struct {
	slots, ids []string
	rows       []pgtype.TID
}

func (k *keys) add(slot, id string, row pgtype.TID) {
	k.slots, k.ids, k.rows = append(k.slots, slot), append(k.ids, id), append(k.rows, row)
}

// outgoing is a due message published and not confirmed yet.
type outgoing struct {
	slot, id string
	row      pgtype.TID
	late     time.Duration // its delay when read
	msg      *wire.Message
}

// batchSent is what publish sent: the messages awaiting their confirms, by number, and those
// confirmed so far.
type batchSent struct {
	start     time.Time
	waiting   map[uint64]outgoing
	confirmed keys
	sent      int
	last      outgoing // the last message published
	refused   error    // the first refusal among its verdicts
}

// publish publishes the due messages not cancelled, in order. It returns them, and the rows it
// dropped as cancelled.
func (s *Sender) publish(ctx context.Context, ds []due, cancelled []string) (*batchSent, keys, error) {
	skip := make(map[string]bool, len(cancelled))
	for _, id := range cancelled {
		skip[id] = true
	}
	b := &batchSent{start: time.Now(), waiting: make(map[uint64]outgoing, len(ds))}
	var cancels keys
	for i := range ds {
		m := &ds[i].msg
		if skip[m.AMQPMessageID()] {
			cancels.add(ds[i].slot, m.AMQPMessageID(), ds[i].row)
			continue
		}
		if err := s.dial(ctx); err != nil {
			return nil, keys{}, err
		}
		if ctx.Err() != nil {
			break // stopping: the rest waits for the next relay
		}
		seq, err := s.pub.Publish(ctx, m)
		if errors.Is(err, wire.ErrUnpublishable) {
			seq, err = s.pub.Park(ctx, &wire.Parked{Message: *m, Reason: err.Error(), Table: s.t.schedule, Database: s.db})
		}
		if err != nil && ctx.Err() != nil {
			break // a publish ended by the stop wrote nothing
		}
		if err != nil {
			if errors.As(err, new(*wire.TooLargeError)) { // written, then refused
				b.sent++
				b.last = outgoing{slot: ds[i].slot, id: m.AMQPMessageID(), row: ds[i].row, late: ds[i].lateness, msg: m}
			}
			return b, cancels, fmt.Errorf("publish scheduled %s: %w", m.AMQPMessageID(), err)
		}
		b.waiting[seq] = outgoing{slot: ds[i].slot, id: m.AMQPMessageID(), row: ds[i].row, late: ds[i].lateness, msg: m}
		b.sent++
		b.last = b.waiting[seq]
	}
	if f, ok := s.pub.(wire.Flusher); ok && len(b.waiting) > 0 {
		if err := f.Flush(); err != nil {
			return nil, keys{}, fmt.Errorf("flush: %w", err)
		}
	}
	return b, cancels, nil
}

// await waits for a verdict on every message of b. It moves each confirmed one to b.confirmed.
// Verdicts on later's messages, published after b's, go to later. It returns b's first refusal,
// after its other verdicts, or why the wait ended early. The lateness of a message is its delay when
// read plus the time to its confirm.
func (s *Sender) await(ctx context.Context, b, later *batchSent) error {
	timer := time.NewTimer(confirmTimeout)
	defer timer.Stop()
	for len(b.waiting) > 0 {
		select {
		case c, ok := <-s.pub.Confirms():
			if !ok {
				return errors.Join(b.refused, errors.New("publisher: session closed"))
			}
			to := b
			o, known := b.waiting[c.Seq]
			if !known && later != nil {
				to = later
				o, known = later.waiting[c.Seq]
			}
			if c.Err != nil {
				err := fmt.Errorf("broker did not confirm scheduled message %d: %w", c.Seq, c.Err)
				if !known {
					return errors.Join(b.refused, err) // the session ended: no more verdicts come
				}
				delete(to.waiting, c.Seq)
				if to.refused == nil {
					to.refused = err
				}
				continue
			}
			if !known {
				continue
			}
			delete(to.waiting, c.Seq)
			to.confirmed.add(o.slot, o.id, o.row)
			at := c.At
			if at.IsZero() {
				at = time.Now()
			}
			if s.cfg.Lateness != nil {
				s.cfg.Lateness(o.late + at.Sub(to.start))
			}
		case <-timer.C:
			return errors.Join(b.refused, fmt.Errorf("%d scheduled messages unconfirmed after %s", len(b.waiting), confirmTimeout))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return b.refused
}

// tooLarge handles a batch whose session the broker closed, refusing a message for its size (err).
// Later messages were published after b's in that session. A message sent alone is that message:
// it is parked without its payload, as the relay parks such a row. Otherwise the next turns send
// the messages one by one to find it. It returns err, or nil once the message is parked and counts
// as confirmed.
func (s *Sender) tooLarge(ctx context.Context, b *batchSent, later int, err error) error {
	if b.sent != 1 || len(b.confirmed.ids) > 0 || later > 0 {
		s.alone = b.sent + later
		return err
	}
	_ = s.pub.Close() // the broker closed it
	s.pub = nil
	if err := s.dial(ctx); err != nil {
		return err
	}
	o := b.last
	m := *o.msg
	m.Payload = nil
	seq, perr := s.pub.Park(ctx, &wire.Parked{Message: m, Reason: fmt.Sprintf("%s: %v", wire.ErrUnpublishable, err),
		Table: s.t.schedule, Database: s.db, Size: len(o.msg.Payload)})
	if perr != nil {
		return fmt.Errorf("park scheduled %s, too large: %w", o.id, perr)
	}
	parked := &batchSent{start: b.start, waiting: map[uint64]outgoing{seq: o}}
	if perr := s.await(ctx, parked, nil); perr != nil {
		return fmt.Errorf("park scheduled %s, too large: %w", o.id, perr)
	}
	s.cfg.Logger.Warn("scheduled delivery: parked a message the broker refused for its size", "msg_id", o.id, "error", err)
	b.confirmed = parked.confirmed
	s.alone = 0
	return nil
}
