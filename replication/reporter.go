package replication

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/checkpoint"
	"github.com/walbox/walbox/internal/killpoint"
)

// reporter is the goroutine that checks, records and reports the session's position.
// For the length of the stream, it owns the watch connection: coverage checks and the registry.
// It also owns every standby status update on the replication connection.
// The stream's goroutine only offers it the watermark and runs no SQL.
// Nothing the stream does waits on the database.
//
// Each report takes the latest mark offered and caps it at the last verified coverage position.
// It records that position, and only then sends it: the slot is never ahead of its record.
// When to report is a checkpoint.Schedule's answer; the reporter acts on it.
// On its timer the reporter also judges the server's silence, whatever the stream is doing.
// It ends the session when the server stays silent beyond the silence bound.
//
// The reader goroutine reads the replication connection while the reporter writes to it.
// The pgconn package allows one reader and one writer at a time.
// ReceiveMessage reads through the frontend's chunk reader.
// sendStatus writes straight to the socket, touching no state of pgconn's.
// The only other writer is pgconn's own close of a connection whose read failed.
// A net.Conn takes both writes whole.
type reporter struct {
	interval time.Duration
	// silence is how long the server may stay silent, having been asked to reply.
	silence time.Duration
	slot    string
	log     *slog.Logger
	stats   *Stats
	pos     positions
	// send writes a status update to the connection.
	send  func(pglogrepl.StandbyStatusUpdate) error
	heard *heardClock
	// lapse is told of each status update sent; nil in tests.
	lapse *lapse
	// reader is read only through its locked methods; nil in tests.
	reader *reader
	// onFail is called on the reporter's goroutine when it ends in an error.
	onFail func(error)

	// mu guards sched: the stream offers marks while the reporter's goroutine asks it.
	mu    sync.Mutex
	sched *checkpoint.Schedule

	wake   chan struct{}   // has a token when an offer wakes the goroutine (Schedule.Offer)
	reply  chan struct{}   // has a token when a keepalive asked for a reply
	finals chan chan error // a final report, and where its result goes
	stop   chan struct{}   // closed by close
	done   chan struct{}   // closed when the goroutine has returned
	err    error           // why the reporter ended, once done is closed; nil after close
	timer  *time.Timer     // the goroutine's own: fires at the schedule's next time
}

// reporterParts is what newReporter needs.
type reporterParts struct {
	cfg   *Config // the status interval, the slot, the logger and the window
	pos   positions
	send  func(pglogrepl.StandbyStatusUpdate) error
	start checkpoint.Mark // the slot's position when the session started
	// The rest may be zero in tests.
	stats   *Stats
	heard   *heardClock
	silence time.Duration
	lapse   *lapse
	reader  *reader
	onFail  func(error)
}

// positions is where the reporter checks and records positions: the session's watch.
type positions interface {
	// capAt checks the publication when the check is due or when the cap keeps w back.
	// It returns w capped at the last verified coverage position.
	capAt(ctx context.Context, w pglogrepl.LSN) (pglogrepl.LSN, error)
	// record writes lsn to the registry unless it is recorded already.
	record(ctx context.Context, lsn pglogrepl.LSN) error
	// lastRecorded returns the position last recorded.
	lastRecorded() pglogrepl.LSN
	// owes reports whether an idle step from rec to w, to mark m, must be recorded all the same.
	// See watch.owes.
	owes(rec, w pglogrepl.LSN, m checkpoint.Mark) bool
	// replayedCap returns a recorded position lsn capped at what the slot may pass once recorded.
	// On a standby (--replication-url), those are the positions whose record the standby replayed.
	replayedCap(ctx context.Context, lsn pglogrepl.LSN) (pglogrepl.LSN, error)
}

// newReporter returns a reporter whose first status update is due at once; start runs it.
func newReporter(p reporterParts) *reporter {
	r := &reporter{interval: p.cfg.StatusInterval, silence: p.silence, slot: p.cfg.Slot, log: p.cfg.Logger,
		stats: p.stats, pos: p.pos, send: p.send, heard: p.heard, lapse: p.lapse, reader: p.reader,
		onFail: p.onFail, sched: checkpoint.NewSchedule(p.start, reportEvery(p.cfg.StatusInterval, p.lapse), p.cfg.Window),
		wake: make(chan struct{}, 1), reply: make(chan struct{}, 1), finals: make(chan chan error),
		stop: make(chan struct{}), done: make(chan struct{})}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r
}

// reportEvery returns the longest time between two status updates. That is the status interval,
// or a third of the lapse bound if shorter. The server asks for a reply at half its timeout.
// That is only a quarter of it before the bound: a relay starved that long ended its own session.
// Sending at a third of the bound leaves two thirds to a starved goroutine.
func reportEvery(interval time.Duration, l *lapse) time.Duration {
	if l == nil || l.bound == 0 {
		return interval
	}
	return min(interval, l.bound/3)
}

// socketSender returns a send for newReporter that writes to conn's socket (sendStatus).
func socketSender(conn *pgconn.PgConn) func(pglogrepl.StandbyStatusUpdate) error {
	return func(u pglogrepl.StandbyStatusUpdate) error { return sendStatus(conn.Conn(), u) }
}

// sendStatus writes a standby status update straight to the connection's socket, as one write.
// The function pglogrepl.SendStandbyStatusUpdate would go through pgconn's write buffer.
// The pgconn package's own close of a connection whose read failed writes to that buffer.
// It writes from a goroutine of its own.
// The two would race, and could send its Terminate twice.
// A net.Conn takes writes from several goroutines.
func sendStatus(c net.Conn, u pglogrepl.StandbyStatusUpdate) error {
	const pgEpoch = 946684800 // 2000-01-01 in Unix seconds
	t := u.ClientTime
	if t.IsZero() {
		t = time.Now()
	}
	usec := (t.Unix()-pgEpoch)*1_000_000 + int64(t.Nanosecond()/1000)
	msg := make([]byte, 0, 39)
	msg = append(msg, 'd', 0, 0, 0, 38, pglogrepl.StandbyStatusUpdateByteID)
	msg = binary.BigEndian.AppendUint64(msg, uint64(u.WALWritePosition))
	msg = binary.BigEndian.AppendUint64(msg, uint64(u.WALFlushPosition))
	msg = binary.BigEndian.AppendUint64(msg, uint64(u.WALApplyPosition))
	msg = binary.BigEndian.AppendUint64(msg, uint64(usec))
	reply := byte(0)
	if u.ReplyRequested {
		reply = 1
	}
	_, err := c.Write(append(msg, reply))
	return err
}

func (r *reporter) start() {
	r.mu.Lock()
	next := r.sched.Next()
	r.mu.Unlock()
	r.timer = time.NewTimer(time.Until(next))
	go r.run()
}

func (r *reporter) run() {
	defer close(r.done)
	defer r.timer.Stop()
	for {
		var err error
		select {
		case <-r.wake:
			r.awake()
		case <-r.reply:
			err = r.request()
		case <-r.timer.C:
			err = r.tick()
		case res := <-r.finals:
			err = r.request()
			res <- err
		case <-r.stop:
			return
		}
		if err != nil {
			r.err = err
			if r.onFail != nil {
				r.onFail(err)
			}
			return
		}
	}
}

// offer publishes the stream's mark to the reporter; it never blocks.
// It wakes the goroutine only when the schedule says so (checkpoint.Schedule.Offer).
func (r *reporter) offer(m checkpoint.Mark) {
	r.mu.Lock()
	wake := r.sched.Offer(m)
	r.mu.Unlock()
	if wake {
		signal(r.wake)
	}
}

// replyNow asks for a status update at once, as a keepalive that requests a reply needs.
func (r *reporter) replyNow() { signal(r.reply) }

// final sends a status update with the latest mark.
// It returns the update's error, or the error that ended the reporter.
func (r *reporter) final() error {
	res := make(chan error, 1)
	select {
	case r.finals <- res:
		return <-res
	case <-r.done:
		if r.err == nil {
			return errors.New("status reporter stopped")
		}
		return r.err
	}
}

// failed is closed when the reporter has ended; failure says why.
func (r *reporter) failed() <-chan struct{} { return r.done }

// failure returns the error that ended the reporter, once failed is closed.
func (r *reporter) failure() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}

// close stops the reporter and waits for it: the watch connection is the relay's again.
func (r *reporter) close() {
	close(r.stop)
	<-r.done
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// latest returns the mark offered last.
func (r *reporter) latest() checkpoint.Mark {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sched.Latest()
}

// awake tells the schedule that an offer woke the goroutine.
// Watch reads the latest mark and decides whether offers wake the goroutine, under the one lock.
// So no offer falls between: its messages would otherwise wait for the status interval.
func (r *reporter) awake() {
	r.mu.Lock()
	r.sched.Watch(time.Now())
	r.mu.Unlock()
	r.arm()
}

// request reports at once: a keepalive asked for a reply, or the session ends.
func (r *reporter) request() error {
	r.mu.Lock()
	r.sched.Request()
	r.mu.Unlock()
	return r.reportIfDue()
}

// tick runs when the timer fires.
// It judges the server's silence, then reports if the schedule says a report is due.
func (r *reporter) tick() error {
	if silent := r.silent(); silent > r.silence {
		return fmt.Errorf("receive: %w for %v, though asked to reply; taking the connection for dead",
			errServerSilent, silent.Round(time.Millisecond))
	}
	return r.reportIfDue()
}

// reportIfDue reports if the schedule says a report is due now, and sets the timer otherwise.
func (r *reporter) reportIfDue() error {
	r.mu.Lock()
	due := r.sched.Due(time.Now())
	r.mu.Unlock()
	if due {
		return r.report()
	}
	r.arm()
	return nil
}

// report caps the latest mark at the last verified coverage position and records it.
// Then it sends it as written, flushed and applied.
// So the slot is never ahead of the record by walbox's doing.
// All three positions are set: pglogrepl would copy the write position into a zero flush position.
//
// This is the only place that sends a position to the server.
func (r *reporter) report() error {
	ctx := context.Background()
	m := r.latest()
	w, err := r.pos.capAt(ctx, m.Watermark)
	if err != nil {
		return err
	}
	if rec := r.pos.lastRecorded(); checkpoint.IdleStep(rec, w, m.Moved) && !r.pos.owes(rec, w, m) {
		w = rec
	}
	if err := r.pos.record(ctx, w); err != nil {
		return err
	}
	killpoint.Hit("report.recorded")
	if w, err = r.pos.replayedCap(ctx, w); err != nil {
		return err
	}
	if err := r.connectionLost(); err != nil {
		// pgconn closes a connection whose read failed from a goroutine of its own, writing to it.
		// A status update now would race with that, and is lost anyway.
		return err
	}
	err = r.send(pglogrepl.StandbyStatusUpdate{
		WALWritePosition: w,
		WALFlushPosition: w,
		WALApplyPosition: w,
		ClientTime:       time.Now(),
		ReplyRequested:   r.silent() >= r.interval/2,
	})
	if err != nil {
		return fmt.Errorf("send status update: %w", err)
	}
	killpoint.Hit("report.sent")
	if r.lapse != nil {
		r.lapse.sent()
	}
	r.mu.Lock()
	moved := w != r.sched.Reported()
	r.sched.Sent(m, w, time.Now())
	r.mu.Unlock()
	if moved {
		r.log.Debug("confirmed position", "slot", r.slot, "lsn", w.String())
	}
	if r.stats != nil {
		r.stats.confirmedLSN(w)
	}
	r.arm()
	return nil
}

// arm sets the timer to the schedule's next time.
func (r *reporter) arm() {
	r.mu.Lock()
	t := r.sched.Next()
	r.mu.Unlock()
	if r.timer != nil {
		if !r.timer.Stop() {
			select {
			case <-r.timer.C:
			default:
			}
		}
		r.timer.Reset(time.Until(t))
	}
}

// silent returns how long the server has sent nothing, while the reader was reading it.
func (r *reporter) silent() time.Duration {
	if r.heard == nil || (r.reader != nil && !r.reader.listening()) {
		return 0
	}
	return r.heard.silent()
}

// connectionLost returns the error that ended the reader, if the connection failed.
// It returns nil if the stream stopped the reader.
func (r *reporter) connectionLost() error {
	if r.reader == nil {
		return nil
	}
	if err := r.reader.failure(); err != nil && !errors.Is(err, errReaderStopped) {
		return err
	}
	return nil
}
