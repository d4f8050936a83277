package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/walbox/walbox/checkpoint"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/wire"
)

// stream is one replication session: it owns the replication connection and the publishing
// session, and runs in a single goroutine.
type stream struct {
	cfg        *Config
	log        *slog.Logger
	conn       *pgconn.PgConn
	watch      *watch // records positions before they are reported, and checks the publication
	pub        Publisher
	dec        *decoder.Decoder
	track      *checkpoint.Tracker
	reported   pglogrepl.LSN // flush position last reported to the server
	moved      pglogrepl.LSN // the watermark as outbox transactions, not keepalives, last moved it
	statusDue  time.Time     // when the next status update is due
	statusSent time.Time     // when the last status update was sent
	heard      *heardClock   // when the socket last read bytes from the server
	silence    time.Duration // how long the server may stay silent, having been asked to reply
	stats      *Stats
	obs        Observer
	flights    flightLog // messages in flight, for confirm latencies
	commit     time.Time // commit time of the transaction being read

	deadline statusDeadline // see untilStatus
	keeper   statusKeeper   // sends status updates during a long publish call
	stall    *stall         // the relay's; see window
	backlog  [][]byte       // CopyData the keeper read during a publish call, to handle first
}

// statusDeadline is a context ending at the status deadline at, derived from parent.
type statusDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc
	parent context.Context
	at     time.Time
}

// run streams until ctx ends (then shuts down gracefully and returns nil) or an error ends the
// session.
func (s *stream) run(ctx context.Context) error {
	// Publishing outlives ctx by the shutdown timeout: a message received just before the end is
	// still published, and its confirm awaited, rather than failing the final status update.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(s.cfg.ShutdownTimeout, cancel) })
	defer stop()

	// receive waits on a read deadline, not on a context: cut the wait short when either ends.
	wake := func() { _ = s.conn.Conn().SetReadDeadline(time.Now()) }
	stopWake := context.AfterFunc(ctx, wake)
	defer stopWake()
	stopWakeP := context.AfterFunc(pctx, wake)
	defer stopWakeP()
	defer s.dropDeadline()
	s.keeper.s = s
	defer s.keeper.stop()

	confirms := s.pub.Confirms()
	for {
		if err := s.drainConfirms(confirms); err != nil {
			return err
		}
		if err := s.maybeSendStatus(false); err != nil {
			return err
		}
		readCtx := ctx
		if ctx.Err() != nil {
			// Stop reading at a transaction boundary, so that the final status covers what was
			// published; give up on that when the shutdown timeout runs out.
			if !s.track.Open() || pctx.Err() != nil {
				return s.shutdown(pctx, confirms)
			}
			readCtx = pctx
		}
		if s.track.InFlight() >= s.window() {
			if err := s.waitConfirm(readCtx, confirms); err != nil {
				return err
			}
			continue
		}
		if err := s.receive(readCtx, pctx); err != nil {
			return err
		}
	}
}

// receive reads one message from the server, waiting at most until the next status update is due
// or ctx ends, and publishes with pctx.
//
// The wait is bounded by a read deadline on the socket rather than by a context: pgconn watches
// a cancellable context with a goroutine of its own on every call, which costs more than
// decoding the message. run wakes a read blocked when ctx ends.
func (s *stream) receive(ctx, pctx context.Context) error {
	if len(s.backlog) > 0 {
		data := s.backlog[0]
		s.backlog[0] = nil
		s.backlog = s.backlog[1:]
		return s.handleCopyData(pctx, data)
	}
	if err := s.conn.Conn().SetReadDeadline(s.statusDue); err != nil {
		return fmt.Errorf("receive: set read deadline: %w", err)
	}
	msg, err := s.conn.ReceiveMessage(context.Background())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if pgconn.Timeout(err) {
			return s.checkHeard()
		}
		return fmt.Errorf("receive: %w", classify(err, s.cfg.Slot))
	}
	data, err := copyData(msg, s.cfg.Slot)
	if err != nil || data == nil {
		return err
	}
	return s.handleCopyData(pctx, data)
}

// copyData returns the data of a CopyData message from the server; nil and no error for a
// notice; an error for anything else, which ends the stream.
func copyData(msg pgproto3.BackendMessage, slot string) ([]byte, error) {
	switch msg := msg.(type) {
	case *pgproto3.CopyData:
		if msg.Data == nil {
			return []byte{}, nil // empty, but not a notice: handleCopyData refuses it
		}
		return msg.Data, nil
	case *pgproto3.ErrorResponse:
		return nil, fmt.Errorf("replication stream: %w", classify(pgconn.ErrorResponseToPgError(msg), slot))
	case *pgproto3.CopyDone:
		return nil, errors.New("replication stream: server ended the stream")
	case *pgproto3.NoticeResponse:
		return nil, nil
	}
	return nil, fmt.Errorf("replication stream: unexpected message %T", msg)
}

// checkHeard fails the session when the server has been silent for longer than ServerTimeout.
// Every status update asks for a reply once half a status interval passed without a byte, so only a
// dead connection (a silent network partition, a server gone without closing it) stays silent.
func (s *stream) checkHeard() error {
	if silent := s.silent(); silent > s.silence {
		return fmt.Errorf("receive: %w for %v, though asked to reply; taking the connection for dead",
			ErrServerSilent, silent.Round(time.Millisecond))
	}
	return nil
}

// silent returns how long the server has sent nothing at all.
func (s *stream) silent() time.Duration { return s.heard.silent() }

func (s *stream) handleCopyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return errors.New("replication stream: empty CopyData message")
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("replication stream: keepalive: %w", err)
		}
		s.stats.serverWALEnd(ka.ServerWALEnd)
		// Everything before the keepalive's WAL end was sent and handled, so with nothing in
		// flight and no transaction open that position is safe to confirm.
		s.track.AdvanceIdle(ka.ServerWALEnd)
		if ka.ReplyRequested {
			return s.maybeSendStatus(true)
		}
		return nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("replication stream: %w", err)
		}
		return s.handleWAL(ctx, xld)
	default:
		return fmt.Errorf("replication stream: unknown CopyData message type %q", data[0])
	}
}

func (s *stream) handleWAL(ctx context.Context, xld pglogrepl.XLogData) error {
	ev, err := s.dec.Decode(xld.WALStart, xld.WALData)
	if decoder.IsBadRow(err) {
		var de *decoder.Error
		errors.As(err, &de)
		if !s.owns(de.Table, &de.Partial) {
			return nil
		}
		return s.park(ctx, &de.Partial, de.Table, xld.WALStart, err)
	}
	if err != nil {
		return fatal(fmt.Errorf("decode: %w", err))
	}
	switch ev.Kind {
	case decoder.KindBegin:
		s.track.Begin()
		s.stats.begin(ev.CommitTime)
		s.commit = ev.CommitTime
	case decoder.KindRow:
		if !s.owns(ev.Table, &ev.Message) {
			return nil
		}
		seq, err := s.publish(ctx, func(ctx context.Context) (uint64, error) { return s.pub.Publish(ctx, &ev.Message) })
		if errors.Is(err, wire.ErrUnpublishable) {
			return s.park(ctx, &ev.Message, ev.Table, xld.WALStart, err)
		}
		if err != nil {
			return publishFailed(fmt.Errorf("publish %s at %s: %w", ev.Message.AMQPMessageID(), xld.WALStart, err))
		}
		if err := s.dispatch(seq, &ev.Message); err != nil {
			return err
		}
		s.stats.published()
		s.obs.Observe(Event{Kind: Published, Seq: seq, Message: &ev.Message, EventType: ev.Message.EventType})
	case decoder.KindCommit:
		s.track.Commit(ev.EndLSN)
		s.moved = s.track.Watermark()
		s.stats.received(ev.EndLSN)
		s.reportSoon()
	}
	return nil
}

// publish hands m to the broker. A publish held up by the broker (a memory or disk alarm blocks
// publishers) is given up at each status deadline, so that the status update still goes out and
// the server keeps the session, and then tried again. The publisher guarantees that a publish
// ended by its context while waiting wrote nothing and left the session usable; an error that
// says the session is gone ends the session here too, whatever else it wraps, or the retry
// would spin on a dead session.
func (s *stream) publish(ctx context.Context, send func(context.Context) (uint64, error)) (uint64, error) {
	defer s.stats.Blocked.Store(false)
	for {
		if time.Until(s.statusDue) < s.cfg.StatusInterval/2 {
			// Send the status now rather than give the publish a deadline a moment away: a
			// publish that checks a new exchange is cut, session and all, when its ctx ends.
			if err := s.sendStatus(); err != nil {
				return 0, err
			}
		}
		seq, err := s.keeper.during(s.untilStatus(ctx), s.deadline.cancel, send)
		if !waitedOut(ctx, err) {
			return seq, err
		}
		s.stats.Blocked.Store(true)
		if err := s.sendStatus(); err != nil {
			return 0, err
		}
	}
}

// untilStatus returns a context that ends with parent or at the next status deadline. It is
// made once per status interval, not once per message.
func (s *stream) untilStatus(parent context.Context) context.Context {
	if d := &s.deadline; d.ctx == nil || d.parent != parent || !d.at.Equal(s.statusDue) {
		s.dropDeadline()
		d.ctx, d.cancel = context.WithDeadline(parent, s.statusDue)
		d.parent, d.at = parent, s.statusDue
	}
	return s.deadline.ctx
}

func (s *stream) dropDeadline() {
	if s.deadline.cancel != nil {
		s.deadline.cancel()
	}
	s.deadline = statusDeadline{}
}

// waitedOut reports whether err says only that a publish waited until its status deadline, with
// the session still alive and nothing written.
func waitedOut(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, wire.ErrSessionClosed)
}

// park sets aside a row that can never become a deliverable message, so that the stream moves
// on. The parked copy is confirmed like any message: the slot passes the row only once the broker
// has it.
func (s *stream) park(ctx context.Context, m *wire.Message, table string, lsn pglogrepl.LSN, why error) error {
	p := &wire.Parked{Message: *m, Reason: why.Error(), Table: table, LSN: lsn.String()}
	seq, err := s.publish(ctx, func(ctx context.Context) (uint64, error) { return s.pub.Park(ctx, p) })
	if err != nil {
		return publishFailed(fmt.Errorf("park %s at %s: %w", m.AMQPMessageID(), lsn, err))
	}
	if err := s.dispatch(seq, m); err != nil {
		return err
	}
	s.stats.Parked.Add(1)
	kind := "unpublishable"
	if decoder.IsBadRow(why) {
		kind = "bad_row"
	}
	s.obs.Observe(Event{Kind: Parked, Seq: seq, Message: m, EventType: m.EventType, Reason: kind, Err: why})
	s.log.Warn("parked a message that can never be delivered", "msg_id", m.AMQPMessageID(), "lsn", lsn.String(),
		"table", table, "reason", why.Error())
	return nil
}

// drainConfirms applies every confirm already waiting, without blocking.
func (s *stream) drainConfirms(confirms <-chan wire.Confirm) error {
	for {
		select {
		case c, ok := <-confirms:
			if err := s.applyConfirm(c, ok); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// waitConfirm blocks until a confirm arrives, a status update is due, or ctx ends.
func (s *stream) waitConfirm(ctx context.Context, confirms <-chan wire.Confirm) error {
	timer := time.NewTimer(time.Until(s.statusDue))
	defer timer.Stop()
	select {
	case c, ok := <-confirms:
		return s.applyConfirm(c, ok)
	case <-timer.C:
	case <-ctx.Done():
	}
	return nil
}

func (s *stream) applyConfirm(c wire.Confirm, ok bool) error {
	if !ok {
		return brokerError{errors.New("publisher: session closed")}
	}
	if c.Err != nil {
		s.track.Nack(c.Seq)
		s.obs.Observe(Event{Kind: ConfirmFailed, Seq: c.Seq, Err: c.Err})
		if c.Seq == 0 { // the session died
			return brokerError{fmt.Errorf("broker did not confirm message %d: %w", c.Seq, c.Err)}
		}
		return brokerError{&refused{seq: c.Seq, key: s.flights.get(c.Seq).key, err: c.Err}}
	}
	if err := s.track.Ack(c.Seq); err != nil {
		return err
	}
	s.moved = s.track.Watermark()
	now := c.At
	if now.IsZero() {
		now = time.Now()
	}
	f := s.flights.get(c.Seq)
	ev := Event{Kind: Confirmed, Seq: c.Seq, EventType: f.eventType, ConfirmLatency: now.Sub(f.at)}
	if !f.commit.IsZero() {
		ev.CommitLatency = now.Sub(f.commit)
	}
	s.obs.Observe(ev)
	s.passed(f.key)
	s.stats.confirmed()
	s.stats.LastConfirm.Store(now.UnixNano())
	s.updateInFlight()
	s.reportSoon()
	return nil
}

// dispatch records a published message with the tracker and in the flight log.
func (s *stream) dispatch(seq uint64, m *wire.Message) error {
	if err := s.track.Dispatch(seq); err != nil {
		return err
	}
	s.flights.put(seq, flight{at: time.Now(), commit: s.commit, eventType: m.EventType, key: keyOf(m)})
	s.updateInFlight()
	return nil
}

// updateInFlight publishes the in-flight count and the age of the oldest unconfirmed message.
func (s *stream) updateInFlight() {
	n := s.track.InFlight()
	s.stats.InFlight.Store(int64(n))
	if n == 0 {
		s.stats.OldestSent.Store(0)
		return
	}
	s.stats.OldestSent.Store(s.flights.get(s.track.Acked() + 1).at.UnixNano())
}

// maybeSendStatus reports the watermark when the status interval has passed, or at once when
// force is set.
func (s *stream) maybeSendStatus(force bool) error {
	if !force && time.Now().Before(s.statusDue) {
		return nil
	}
	return s.sendStatus()
}

// sendStatus reports the watermark as written, flushed and applied, capped at the last position
// the watch verified the publication for, after recording it in the registry: the slot is never
// ahead of the record by walbox's doing. The publication is checked again when the check is due or
// when the cap holds the watermark back. All three positions are set explicitly: pglogrepl would
// otherwise copy the write position into a zero flush position.
func (s *stream) sendStatus() error {
	ctx := context.Background()
	if time.Since(s.watch.checked) >= s.cfg.StatusInterval {
		if err := s.watch.check(ctx); err != nil {
			return err
		}
	}
	// A watermark held back by the cap takes a check whose predecessor read a position past it:
	// at most two more, one round trip each.
	for i := 0; i < 2 && s.track.Watermark() > s.watch.limit; i++ {
		if err := s.watch.check(ctx); err != nil {
			return err
		}
	}
	w := min(s.track.Watermark(), s.watch.limit)
	if s.idleStep(s.watch.recorded, w) {
		w = s.watch.recorded
	}
	if err := s.watch.record(ctx, w); err != nil {
		return err
	}
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: w,
		WALFlushPosition: w,
		WALApplyPosition: w,
		ClientTime:       time.Now(),
		ReplyRequested:   s.silent() >= s.cfg.StatusInterval/2,
	})
	if err != nil {
		return fmt.Errorf("send status update: %w", err)
	}
	if w != s.reported {
		s.log.Debug("confirmed position", "slot", s.cfg.Slot, "lsn", w.String())
	}
	s.reported = w
	s.stats.confirmedLSN(w)
	s.statusSent = time.Now()
	s.statusDue = s.statusSent.Add(s.cfg.StatusInterval)
	s.reportSoon()
	return nil
}

// idleRecordStep is how far keepalives alone must move the watermark past the recorded position
// before it is recorded and reported: more than the WAL of one record (a full page image after a
// checkpoint included), little next to the WAL a slot retains.
const idleRecordStep = 64 << 10

// idleStep reports whether only keepalives moved the watermark from from to to, and by less than
// idleRecordStep: most likely past the WAL of the relay's own last record. Recording that would be
// WAL for the next keepalive to carry, a write every status interval on an idle database for
// ever, so such a step is neither recorded nor reported.
func (s *stream) idleStep(from, to pglogrepl.LSN) bool {
	return to > from && s.moved <= from && to-from < idleRecordStep
}

// reportDelay is how soon a watermark that moved is reported: a relay killed then sends again
// little more than its window.
const reportDelay = 100 * time.Millisecond

// reportSoon brings the next status update forward to reportDelay after the last one when the
// watermark has moved past what was reported.
func (s *stream) reportSoon() {
	if w := s.track.Watermark(); w <= s.reported || s.idleStep(s.reported, w) {
		return
	}
	if soon := s.statusSent.Add(min(reportDelay, s.cfg.StatusInterval)); soon.Before(s.statusDue) {
		s.statusDue = soon
	}
}

// shutdown waits for outstanding confirms until pctx ends (the shutdown timeout after the stop)
// and reports the final position. Whatever is still unconfirmed is not lost: the slot has not
// moved past it, so the next run sends it again.
func (s *stream) shutdown(pctx context.Context, confirms <-chan wire.Confirm) error {
	for s.track.InFlight() > 0 {
		var err error
		select {
		case c, ok := <-confirms:
			err = s.applyConfirm(c, ok)
		case <-pctx.Done():
			// Confirms that arrived with the timeout still count.
			if err = s.drainConfirms(confirms); err == nil && s.track.InFlight() > 0 {
				err = fmt.Errorf("still unconfirmed after %v", s.cfg.ShutdownTimeout)
			}
		}
		if err != nil {
			s.log.Warn("shutdown: messages will be sent again on the next run", "slot", s.cfg.Slot,
				"unconfirmed", s.track.InFlight(), "error", err)
			break
		}
	}
	if err := s.sendStatus(); err != nil {
		return err
	}
	s.log.Info("stopped", "slot", s.cfg.Slot, "lsn", s.track.Watermark().String())
	return nil
}

// owns reports whether this relay publishes or parks m, decoded from table ("" for a logical
// decoding message). A row reached the slot through its shard's row filter already, but every
// slot receives every logical decoding message whatever its publication, so a shard's relay keeps
// to the emitted messages whose aggregate id falls in its shard, as the row filter would select
// them. That holds for a message to be parked too (not transactional, or malformed): it is parked
// by one shard's relay, not by each; one whose aggregate id could not be read goes where an empty
// one does.
func (s *stream) owns(table string, m *wire.Message) bool {
	return table != "" || s.cfg.Shards <= 1 || shard.Of(m.AggregateID, s.cfg.Shards) == s.cfg.Shard
}
