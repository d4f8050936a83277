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
	"github.com/walbox/walbox/internal/killpoint"
)

// reporter is the goroutine that checks, records and reports the session's position. It owns the
// watch connection (coverage checks and the registry) and every standby status update on the
// replication connection, for the length of the stream. The stream's goroutine only publishes
// the watermark to it (offer) and runs no SQL; nothing it does waits on the database.
//
// Each report takes the latest watermark offered, caps it at the last verified coverage position,
// records it, and only then sends it: the slot is never ahead of its record. Reports go out when
// the status interval has passed, sooner for messages below the watermark (see soon), at once
// when a keepalive asks for a reply, and at the end of the stream (final). On its timer the reporter
// also judges the server's silence, whatever the stream's goroutine is doing (a long publish
// call, say), and ends the session when the server stayed silent beyond the silence bound.
//
// The reader goroutine reads the replication connection while the reporter writes to it. pgconn
// allows one reader and one writer at a time: ReceiveMessage reads through the frontend's
// chunk reader, and sendStatus writes straight to the socket, touching no state of pgconn's.
// The only other writer while the reporter runs is pgconn's own close of a connection whose
// read failed; a net.Conn takes both writes whole.
type reporter struct {
	interval time.Duration
	silence  time.Duration // how long the server may stay silent, having been asked to reply
	slot     string
	log      *slog.Logger
	stats    *Stats
	pos      positions
	send     func(pglogrepl.StandbyStatusUpdate) error // writes a status update to the connection
	heard    *heardClock
	lapse    *lapse      // told of each status update sent; nil in tests
	reader   *reader     // read only through its locked methods; nil in tests
	onFail   func(error) // called on the reporter's goroutine when it ends in an error

	backlog uint64 // messages the watermark passed since the last report that bring the next forward: half a window

	mu        sync.Mutex
	latest    mark   // the watermark the stream offered last
	listen    bool   // the goroutine wants the next offer that carries messages: it watches none yet
	reportedN uint64 // the messages below the newest mark whose messages a report's position covered

	wake   chan struct{}   // holds a token when a mark was offered that the goroutine listens for
	reply  chan struct{}   // holds a token when a keepalive asked for a reply
	finals chan chan error // a final report, and where its result goes
	stop   chan struct{}   // closed by close
	done   chan struct{}   // closed when the goroutine has returned
	err    error           // why the reporter ended, once done is closed; nil after close

	// The goroutine's own.
	reported pglogrepl.LSN // the position last sent
	held     []mark        // marks reported but held back by a cap, oldest first (see covered)
	sentN    uint64        // the messages below the mark the last report took, covered or not
	due      time.Time     // when the next status update is due: a status interval after the last
	check    time.Time     // when to look again at the messages watched; zero while none are
	seenN    uint64        // the messages below the watermark at the last look
	sent     time.Time     // when the last status update was sent
	timer    *time.Timer
}

// mark is a watermark offered by the stream: where it is, where outbox transactions (not
// keepalives) last moved it, and how many of the session's messages lie below it
// (checkpoint.Ledger.Passed): all of them at or below moved.
type mark struct {
	w, moved pglogrepl.LSN
	n        uint64
}

// positions is where the reporter checks and records positions: the session's watch.
type positions interface {
	// capAt checks the publication when the check is due or when the cap holds w back, and
	// returns w capped at the last verified coverage position.
	capAt(ctx context.Context, w pglogrepl.LSN) (pglogrepl.LSN, error)
	// record writes lsn to the registry unless it is recorded already.
	record(ctx context.Context, lsn pglogrepl.LSN) error
	// lastRecorded returns the position last recorded.
	lastRecorded() pglogrepl.LSN
	// replayedCap returns a recorded position lsn capped at what the slot may pass once recorded:
	// on a standby (--replication-url), the positions whose record the standby replayed.
	replayedCap(ctx context.Context, lsn pglogrepl.LSN) (pglogrepl.LSN, error)
}

// newReporter returns a reporter whose first status update is due at once; start runs it.
func newReporter(cfg *Config, pos positions, conn *pgconn.PgConn, start mark) *reporter {
	r := &reporter{interval: cfg.StatusInterval, slot: cfg.Slot, log: cfg.Logger, pos: pos, latest: start,
		reported: start.w, reportedN: start.n, sentN: start.n, backlog: uint64(max(cfg.Window/2, 1)),
		listen: true, wake: make(chan struct{}, 1), reply: make(chan struct{}, 1),
		finals: make(chan chan error), stop: make(chan struct{}), done: make(chan struct{})}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if conn != nil {
		r.send = func(u pglogrepl.StandbyStatusUpdate) error { return sendStatus(conn.Conn(), u) }
	}
	return r
}

// sendStatus writes a standby status update straight to the connection's socket, as one write.
// pglogrepl.SendStandbyStatusUpdate would go through pgconn's write buffer, which pgconn's own
// close of a connection whose read failed writes to from a goroutine of its own: the two would
// race, and could send its Terminate twice. A net.Conn takes writes from several goroutines.
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
	r.timer = time.NewTimer(time.Until(r.due))
	go r.run()
}

func (r *reporter) run() {
	defer close(r.done)
	defer r.timer.Stop()
	for {
		var err error
		select {
		case <-r.wake:
			r.soon()
		case <-r.reply:
			err = r.report()
		case <-r.timer.C:
			err = r.tick()
		case res := <-r.finals:
			err = r.report()
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

// offer publishes the stream's watermark to the reporter; it never blocks. It wakes the
// goroutine only when that listens and the mark carries messages not yet reported: once it
// watches them, later offers wait for its next look, so that a confirm does not cost a
// goroutine wake-up of its own. A mark moved only by keepalives or by transactions without
// messages waits for the status interval.
func (r *reporter) offer(m mark) {
	r.mu.Lock()
	r.latest = m
	wake := r.listen && m.n != r.reportedN
	if wake {
		r.listen = false
	}
	r.mu.Unlock()
	if wake {
		signal(r.wake)
	}
}

// replyNow asks for a status update at once, as a keepalive that requests a reply needs.
func (r *reporter) replyNow() { signal(r.reply) }

// final sends a status update with the latest watermark and returns its error, or the error
// that ended the reporter.
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

func (r *reporter) mark() mark {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.latest
}

// tick runs when the status timer fires: it judges the server's silence, sends the status
// update that is due, and looks at a watermark that moved (see soon).
func (r *reporter) tick() error {
	if silent := r.silent(); silent > r.silence {
		return fmt.Errorf("receive: %w for %v, though asked to reply; taking the connection for dead",
			errServerSilent, silent.Round(time.Millisecond))
	}
	now := time.Now()
	if !now.Before(r.due) {
		return r.report()
	}
	if !r.check.IsZero() && !now.Before(r.check) {
		if r.ready() {
			return r.report()
		}
		r.check = now.Add(reportDelay)
	}
	r.arm()
	return nil
}

// ready reports whether the messages watched are reported now, before the status interval: the
// stream went quiet (the watermark passed no message since the last look), or it passed the
// backlog since the mark the last report took. That report may have been held back (on a
// standby, each report sends the position the one before recorded); reporting sooner would not
// move the slot past such a cap, so the backlog counts from what was taken, not from what was
// covered.
func (r *reporter) ready() bool {
	m := r.mark()
	quiet := m.n == r.seenN
	r.seenN = m.n
	return quiet || m.n-r.sentN >= r.backlog
}

// report caps the latest watermark at the last verified coverage position, records it in the
// registry and then sends it as written, flushed and applied: the slot is never ahead of the
// record by walbox's doing. All three positions are set explicitly: pglogrepl would otherwise
// copy the write position into a zero flush position.
//
// This is the only place that sends a position to the server.
func (r *reporter) report() error {
	ctx := context.Background()
	m := r.mark()
	w, err := r.pos.capAt(ctx, m.w)
	if err != nil {
		return err
	}
	if rec := r.pos.lastRecorded(); idleStep(rec, w, m.moved) {
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
		// pgconn closes a connection whose read failed from a goroutine of its own, writing to
		// it as it goes: a status update now would race with that, and is lost anyway.
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
	if w != r.reported {
		r.log.Debug("confirmed position", "slot", r.slot, "lsn", w.String())
	}
	r.reported, r.sentN = w, m.n
	r.covered(m, w)
	if r.stats != nil {
		r.stats.confirmedLSN(w)
	}
	r.sent = time.Now()
	r.due, r.check = r.sent.Add(r.interval), time.Time{}
	r.arm()
	r.soon()
	return nil
}

// maxHeld bounds the marks kept while a cap holds reports back; past it the newest is replaced.
const maxHeld = 64

// covered counts as reported the messages of the newest mark whose outbox transactions end at or
// before w, the position sent: m was reported, but a coverage cap, an idle step or a standby's
// replay may have held the position back, and messages not yet in the slot still count towards
// the backlog.
func (r *reporter) covered(m mark, w pglogrepl.LSN) {
	if len(r.held) < maxHeld {
		r.held = append(r.held, m)
	} else {
		r.held[len(r.held)-1] = m
	}
	i := 0
	for i < len(r.held) && r.held[i].moved <= w {
		i++
	}
	if i > 0 {
		r.mu.Lock()
		r.reportedN = r.held[i-1].n
		r.mu.Unlock()
		r.held = append(r.held[:0], r.held[i:]...)
	}
}

// arm sets the timer to the next status update due or the next look, whichever comes first.
func (r *reporter) arm() {
	t := r.due
	if !r.check.IsZero() && r.check.Before(t) {
		t = r.check
	}
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

// idleRecordStep is how far keepalives alone must move the watermark past the recorded position
// before it is recorded and reported: more than the WAL of one record (a full page image after a
// checkpoint included), little next to the WAL a slot retains.
const idleRecordStep = 64 << 10

// idleStep reports whether only keepalives moved the watermark from from to to (outbox
// transactions last moved it to moved), and by less than idleRecordStep: most likely past the
// WAL of the relay's own last record. Recording that would be WAL for the next keepalive to
// carry, a write every status interval on an idle database for ever, so such a step is neither
// recorded nor reported.
func idleStep(from, to, moved pglogrepl.LSN) bool {
	return to > from && moved <= from && to-from < idleRecordStep
}

// reportDelay is how often the reporter looks at a watermark that moved past what was reported.
const reportDelay = 100 * time.Millisecond

// soon starts watching the messages the watermark passed but no report covered. Every
// reportDelay the reporter looks at them (tick): once the stream has gone quiet, or the watermark
// passed half a window of messages since the last report, it reports at once; otherwise at the
// status interval.
//
// A burst is thus reported within about two reportDelays after it ends. A relay killed sends
// again at most its window, plus half a window and about two reportDelays of traffic. A steady
// stream that passes a message in every look, but less than half a window a look, is reported
// once a status interval, not ten times a second: each report costs a coverage check and a
// registry write, which delay the stream's next publish.
//
// While nothing is to watch it listens for the next offer: it reads the watermark and starts
// listening under one lock, so no offer falls between.
func (r *reporter) soon() {
	r.mu.Lock()
	m := r.latest
	still := m.w <= r.reported || idleStep(r.reported, m.w, m.moved) || m.n == r.reportedN
	r.listen = still
	r.mu.Unlock()
	if still || !r.check.IsZero() {
		return
	}
	r.seenN = m.n
	if check := time.Now().Add(min(reportDelay, r.interval)); check.Before(r.due) {
		r.check = check
		r.arm()
	}
}

// silent returns how long the server has sent nothing, while the reader was reading it.
func (r *reporter) silent() time.Duration {
	if r.heard == nil || (r.reader != nil && !r.reader.listening()) {
		return 0
	}
	return r.heard.silent()
}

// connectionLost returns the error that ended the reader, if reading ended because the
// connection failed (not because the stream stopped the reader).
func (r *reporter) connectionLost() error {
	if r.reader == nil {
		return nil
	}
	if err := r.reader.failure(); err != nil && !errors.Is(err, errReaderStopped) {
		return err
	}
	return nil
}
