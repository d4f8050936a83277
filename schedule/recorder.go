package schedule

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/wire"
)

// Numbered is a publishing session whose caller numbers the messages. The verdict of each carries
// the caller's number. publisher.Session and publisher.Lanes are such sessions.
type Numbered interface {
	wire.Publisher
	PublishAs(ctx context.Context, seq uint64, m *wire.Message) (uint64, error)
	ParkAs(ctx context.Context, seq uint64, p *wire.Parked) (uint64, error)
}

// maxBatch bounds the messages one insert records.
const maxBatch = 1000

// writeTimeout bounds one insert into the schedule.
const writeTimeout = 30 * time.Second

// Recorder is a publishing session that also records scheduled messages (Schedule). Publish, Park,
// Schedule and Flush are called from one goroutine, as for any wire.Publisher. A record's verdict
// arrives on Confirms like a publish's, once its insert committed. A failed insert ends the session,
// with a verdict of sequence 0.
type Recorder struct {
	pub  Numbered
	conn *pgx.Conn
	slot string
	sql  string
	into string // the schedule's table, as errors name it
	seq  uint64 // the last number handed out

	mu      sync.Mutex
	pending batch
	seqs    []uint64 // the numbers of pending's messages

	kick      chan struct{}
	confirms  chan wire.Confirm
	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	// recorded, unless nil, learns the earliest deliver_at of each batch once it committed.
	recorded func(time.Time)
	// standbys is set on PostgreSQL 17 and later: a record then waits for synchronized_standby_slots.
	standbys bool
}

// NewRecorder returns pub as a Recorder that records scheduled messages for slot in the schedule in
// schema, over conn. The Recorder owns pub and conn: Close closes both. The function recorded,
// unless nil, learns the earliest deliver_at of each batch recorded (the Sender's Nudge).
func NewRecorder(pub Numbered, conn *pgx.Conn, schema, slot string, window int, recorded func(time.Time)) *Recorder {
	return newRecorder(pub, conn, schema, slot, window, recorded, false, true)
}

// newRecorder returns the Recorder. Without sentBy, it records as before migration 018.
func newRecorder(pub Numbered, conn *pgx.Conn, schema, slot string, window int, recorded func(time.Time), standbys, sentBy bool) *Recorder {
	t := tablesIn(schema)
	r := &Recorder{pub: pub, conn: conn, slot: slot, sql: t.recordSQL(sentBy), into: t.schedule, kick: make(chan struct{}, 1),
		confirms: make(chan wire.Confirm, window+64), stop: make(chan struct{}), recorded: recorded, standbys: standbys}
	r.wg.Add(2)
	go r.forward()
	go r.write()
	return r
}

// Publish publishes m under the next number.
func (r *Recorder) Publish(ctx context.Context, m *wire.Message) (uint64, error) {
	if _, err := r.pub.PublishAs(ctx, r.seq+1, m); err != nil {
		return 0, err
	}
	r.seq++
	return r.seq, nil
}

// Park parks p under the next number.
func (r *Recorder) Park(ctx context.Context, p *wire.Parked) (uint64, error) {
	if _, err := r.pub.ParkAs(ctx, r.seq+1, p); err != nil {
		return 0, err
	}
	r.seq++
	return r.seq, nil
}

// Schedule takes m to record in the schedule, under the next number. It copies what it keeps of m.
// The record is written at the next Flush, or once a batch is full.
func (r *Recorder) Schedule(_ context.Context, m *wire.Message) (uint64, error) {
	c := *m
	c.Payload = bytes.Clone(m.Payload)
	r.mu.Lock()
	err := r.pending.add(&c)
	if err == nil {
		r.seqs = append(r.seqs, r.seq+1)
	}
	full := len(r.seqs) >= maxBatch
	r.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("schedule: %w: %w", wire.ErrUnpublishable, err)
	}
	r.seq++
	if full {
		r.signal()
	}
	return r.seq, nil
}

// Flush writes the pending records, and flushes pub if it holds messages back (wire.Flusher).
func (r *Recorder) Flush() error {
	r.signal()
	if f, ok := r.pub.(wire.Flusher); ok {
		return f.Flush()
	}
	return nil
}

func (r *Recorder) signal() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Confirms yields the verdicts of pub and of the records, each under the number its call returned.
func (r *Recorder) Confirms() <-chan wire.Confirm { return r.confirms }

// Blocked reports whether the broker blocks pub's connection, if pub can tell.
func (r *Recorder) Blocked() bool {
	b, ok := r.pub.(interface{ Blocked() bool })
	return ok && b.Blocked()
}

// Close ends the session: pub, the writer and conn.
func (r *Recorder) Close() error {
	r.closeOnce.Do(func() {
		close(r.stop)
		err := r.pub.Close()
		r.wg.Wait()
		close(r.confirms)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if r.conn != nil {
			err = errors.Join(err, r.conn.Close(ctx))
		}
		r.closeErr = err
	})
	return r.closeErr
}

// forward passes pub's verdicts on.
func (r *Recorder) forward() {
	defer r.wg.Done()
	for c := range r.pub.Confirms() {
		if !r.pass(c) {
			return
		}
	}
}

// pass hands a verdict on; false once Close was called.
func (r *Recorder) pass(c wire.Confirm) bool {
	select {
	case r.confirms <- c:
		return true
	case <-r.stop:
		return false
	}
}

// write records the pending messages whenever signalled, until Close. A failed insert is the
// session's end.
func (r *Recorder) write() {
	defer r.wg.Done()
	for {
		select {
		case <-r.kick:
		case <-r.stop:
			return
		}
		for {
			r.mu.Lock()
			b, seqs := r.pending, r.seqs
			r.pending, r.seqs = batch{}, nil
			r.mu.Unlock()
			if len(seqs) == 0 {
				break
			}
			if err := r.insert(&b); err != nil {
				r.pass(wire.Confirm{Err: fmt.Errorf("%w (%w): insert %d into %s: %w", wire.ErrNotRecorded, wire.ErrSessionClosed, len(seqs), r.into, err)})
				<-r.stop
				return
			}
			if err := r.awaitStandbys(); err != nil {
				r.pass(wire.Confirm{Err: fmt.Errorf("%w (%w): %d inserted into %s, not confirmed: %w", wire.ErrNotRecorded, wire.ErrSessionClosed, len(seqs), r.into, err)})
				<-r.stop
				return
			}
			now := time.Now()
			for _, s := range seqs {
				if !r.pass(wire.Confirm{Seq: s, At: now}) {
					return
				}
			}
			if r.recorded != nil {
				r.recorded(b.earliest())
			}
		}
	}
}

// insert records b in one statement, so in one transaction.
func (r *Recorder) insert(b *batch) error {
	ctx, cancel := r.bounded(writeTimeout)
	defer cancel()
	_, err := r.conn.Exec(ctx, r.sql, b.args(r.slot)...)
	return err
}

// bounded returns a context that ends after d, or at Close.
func (r *Recorder) bounded(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// durableSQL turns synchronous_commit on for the session, if off. Other values flush locally at least.
const durableSQL = "SELECT pg_catalog.set_config('synchronous_commit', 'on', false)" +
	" WHERE pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.=) 'off'"

// Wrap makes p a Recorder for slot, over a new connection to databaseURL. It does so if p lets its
// caller number the messages (Numbered). Otherwise, as for a stream, it returns p. It closes p if
// the connection fails. log, unless nil, learns that the schema lacks migration 018.
func Wrap(ctx context.Context, p wire.Publisher, databaseURL, schema, slot string, window int, recorded func(time.Time), log *slog.Logger) (wire.Publisher, error) {
	n, ok := p.(Numbered)
	if !ok {
		return p, nil
	}
	conn, err := pgconnect.Connect(ctx, databaseURL)
	if err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("connect to the database for the schedule: %w", err)
	}
	// A record is its row's confirm: its commit must be on disk before the slot moves past the row.
	// A database or role with synchronous_commit off would return before that.
	if _, err := conn.Exec(ctx, durableSQL); err != nil {
		_ = p.Close()
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("make the schedule's commits durable: %w", err)
	}
	sentBy, err := hasSentBy(ctx, conn, schema)
	if err != nil {
		_ = p.Close()
		_ = conn.Close(ctx)
		return nil, err
	}
	if !sentBy && log != nil {
		log.Warn("scheduled delivery: messages due later are recorded, none sent until walbox migrate runs",
			"error", errNotMigrated, "slot", slot)
	}
	return newRecorder(n, conn, schema, slot, window, recorded, serverMajor(conn) >= 17, sentBy), nil
}

// sentBySQL reads whether walbox_schedule_done has sent_by (migration 018): true, false, or NULL
// without the table. It looks the table up by name. A missing table or right to the schema is no error.
const sentBySQL = "SELECT pg_catalog.bool_or(a.attname OPERATOR(pg_catalog.=) 'sent_by' AND NOT a.attisdropped)" +
	" FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) a.attrelid" +
	" JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace" +
	" WHERE n.nspname OPERATOR(pg_catalog.=) $1::pg_catalog.name AND c.relname OPERATOR(pg_catalog.=) $2::pg_catalog.name"

// hasSentBy reports whether the schedule in schema is past migration 018. Before it, the relay still
// records, for the sender to send once walbox migrate ran. Without the table, the first record fails.
func hasSentBy(ctx context.Context, conn *pgx.Conn, schema string) (bool, error) {
	var ok *bool
	if err := conn.QueryRow(ctx, sentBySQL, schema, migrations.ScheduleDoneTable).Scan(&ok); err != nil {
		return false, fmt.Errorf("read the columns of %s: %w", tablesIn(schema).done, err)
	}
	return ok == nil || *ok, nil
}
