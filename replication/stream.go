package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/checkpoint"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/wire"
)

// stream is one replication session.
// Its goroutine owns every piece of its state and the publishing session, and runs no SQL.
// The reader goroutine only reads the replication connection (reader.go).
// The reporter goroutine owns the watch connection and every status update (reporter.go).
// The stream hands the reporter the watermark; nothing else is shared.
type stream struct {
	cfg   *Config
	log   *slog.Logger
	conn  *pgconn.PgConn
	watch *watch // records positions before they are reported, and checks the publication: the reporter's while it runs
	pub   Publisher
	dec   *decoder.Decoder
	led   *checkpoint.Ledger[flight] // the messages in flight, how many may be, and the watermark
	stall *stall                     // the relay's memory of a refused message (stall.go)
	stats *Stats
	obs   Observer

	// The position and its reports (reporter.go).
	start   pglogrepl.LSN   // the slot's position when the session started
	moved   pglogrepl.LSN   // the watermark as outbox transactions, not keepalives, last moved it
	txid    uint32          // the id of the transaction being decoded
	xid     uint32          // the newest id among the session's outbox transactions (checkpoint.Mark.Xid)
	offered checkpoint.Mark // the mark last offered to the reporter
	rep     *reporter
	heard   *heardClock   // when the connection last read bytes from the server
	silence time.Duration // how long the server may stay silent, having been asked to reply
	lapse   *lapse        // whether the connection may still hold the slot (lapse.go)

	// gone ends, with a connGone cause, when the reader finds the connection gone or the reporter fails.
	// Every publish call's context derives from it.
	gone      context.Context
	goneCause context.CancelCauseFunc
	clock     callClock // the context of publish calls, and whether one is in progress

	commit time.Time      // commit time of the transaction being read
	origin decoder.Origin // the server's timeline history, for positions (Positioner)
	db     string         // the slot's database, as parked copies name it (wire.ParkedBy)
	final  pglogrepl.LSN  // the commit LSN of the transaction being read (Begin's FinalLSN)
	index  int            // the index of its next row or emitted message
	ev     decoder.Event  // the WAL message being handled, reused for the next: it would escape to the heap

	reader    *reader
	frames    []frame   // taken from the reader and not yet handled: frames[next:]
	read      time.Time // when the reader read the frame being handled
	next      int
	unflushed bool       // published since the publisher was last flushed (if it is a Flusher)
	stop      *stopClock // the shutdown's timing (shutdown.go)
}

// phase is where the stream's loop stands; doc.go draws them.
type phase uint8

const (
	// streaming: reading WAL and publishing it, applying confirms as they arrive.
	streaming phase = iota
	// windowFull: as many messages in flight as the window allows (one while stalled): reading
	// waits for a confirm.
	windowFull
	// finishing: Run's context ended inside a transaction.
	// Reading goes on to its commit, until the shutdown deadline.
	// So the final status covers what was published.
	finishing
	// draining: stopping at a transaction boundary: only confirms are awaited, until the
	// shutdown deadline.
	draining
	// stopped: nothing left to wait for, or the deadline passed: the final status goes out.
	stopped
)

// phase returns the loop's phase.
// A publish call blocked by the broker (publish blocked, see publish) happens inside streaming or finishing.
func (s *stream) phase(ctx context.Context) phase {
	switch {
	case ctx.Err() == nil && s.windowFull():
		return windowFull
	case ctx.Err() == nil:
		return streaming
	case s.stop.expired():
		return stopped
	case s.led.Open():
		return finishing
	case s.led.InFlight() > 0:
		return draining
	}
	return stopped
}

// run streams until ctx ends (then shuts down gracefully and returns nil) or an error ends the session.
// After a broker failure the replication connection is still good.
// It reports what the broker did confirm before it failed.
// So the next session does not send that again.
func (s *stream) run(ctx context.Context) error {
	s.begin(ctx)
	defer s.end()
	err := s.loop(ctx)
	if IsBrokerError(err) {
		s.finalStatus()
	}
	return err
}

// loop is the stream's state machine. Each turn waits for whichever comes first of:
//   - WAL from the reader, when the phase reads;
//   - a confirm;
//   - the end of ctx or of the shutdown deadline;
//   - the end of the connection or of the reporter.
func (s *stream) loop(ctx context.Context) error {
	confirms := s.pub.Confirms()
	for {
		ph := s.phase(ctx)
		if ph == stopped {
			return s.shutdown()
		}
		var frame, frames, failed <-chan struct{}
		switch {
		case !s.reads(ph):
			failed = s.reader.failed // not reading: a connection that ends is seen here
		case s.next < len(s.frames):
			frame = ready // handle the next frame, unless something else is due
		default:
			frames = s.reader.ready
		}
		if frame == nil && len(frames) == 0 {
			// Going back to waiting: what was published goes out now, in one write.
			if err := s.flush(); err != nil {
				return err
			}
		}
		stop := ctx.Done()
		if ph == finishing || ph == draining {
			stop = s.stop.expiredC
		}
		var err error
		select {
		case <-frame:
			err = s.handleFrame()
		case <-frames:
			s.frames, err = s.reader.take(s.frames[:0])
			s.next = 0
		case c, ok := <-confirms:
			err = s.applyConfirms(c, ok)
		case <-s.rep.failed():
			err = s.rep.failure()
		case <-failed:
			err = s.reader.failure()
		case <-stop:
			// The phase moves on: to finishing or draining, or past the deadline to stopped.
		}
		if err != nil && ph == draining {
			s.gaveUp(err)
			return s.finalReport()
		}
		if err != nil {
			return err
		}
	}
}

// flush asks the publisher to write the messages it keeps, if it keeps any: Flusher.Flush.
// The write can last as long as a publish call's (a slow broker).
// The reporter minds the session meanwhile, as during a publish.
func (s *stream) flush() error {
	f, ok := s.pub.(Flusher)
	if !ok || !s.unflushed {
		return nil
	}
	s.unflushed = false
	_, _, err := s.call(func(context.Context) (uint64, error) { return 0, f.Flush() })
	if err != nil {
		return publishFailed(fmt.Errorf("flush: %w", err))
	}
	return nil
}

// ready is always ready to receive from.
var ready = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// reads reports whether the loop takes WAL in phase ph.
func (s *stream) reads(ph phase) bool {
	return (ph == streaming || ph == finishing) && !s.windowFull()
}

// windowFull reports whether the window allows no more messages in flight.
func (s *stream) windowFull() bool { return s.led.Full() }

// begin starts what the session's loop needs: the shutdown clock, the reader and the reporter.
// The method end stops them, and waits for the reader and the reporter.
// Both connections are then the session's again.
func (s *stream) begin(ctx context.Context) {
	s.stop = startStopClock(ctx, s.cfg.ShutdownTimeout, s.stopping, s.expiring)
	s.gone, s.goneCause = context.WithCancelCause(s.stop.publishing)
	s.clock.begin(s.gone, s.cfg.StatusInterval)
	s.reader = startReader(s.conn, s.cfg.Slot, s.heard, s.connFailed)
	s.rep = newReporter(reporterParts{cfg: s.cfg, pos: s.watch, send: socketSender(s.conn),
		start: checkpoint.Mark{Watermark: s.start}, stats: s.stats, heard: s.heard, silence: s.silence,
		lapse: s.lapse, reader: s.reader, onFail: s.connFailed})
	s.rep.start()
	if g, ok := s.pub.(Guarded); ok {
		g.Guard(s.over)
	}
}

func (s *stream) end() {
	s.reader.stop()
	s.rep.close()
	s.goneCause(nil)
	s.clock.close()
	s.stop.release()
}

// connFailed is the word of the reader or the reporter that the session is over.
// The connection is gone, the server silent, or a check failed.
// A publish call in progress ends.
func (s *stream) connFailed(err error) { s.goneCause(connGone{err}) }

// handleFrame handles the next frame taken from the reader.
func (s *stream) handleFrame() error {
	f := s.frames[s.next]
	s.frames[s.next] = frame{}
	s.next++
	s.read = f.read
	err := s.handleCopyData(f.data)
	if f.lent {
		s.ev = decoder.Event{} // the payload shares the frame
		s.reader.giveBack()
	}
	return err
}

func (s *stream) handleCopyData(data []byte) error {
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
		// Everything before the keepalive's WAL end was sent and handled.
		// So with nothing in flight and no transaction open, that position is safe to confirm.
		s.led.AdvanceIdle(ka.ServerWALEnd)
		killpoint.Hit("keepalive")
		s.offer()
		if ka.ReplyRequested {
			s.rep.replyNow()
		}
		return nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("replication stream: %w", err)
		}
		return s.handleWAL(xld)
	default:
		return fmt.Errorf("replication stream: unknown CopyData message type %q", data[0])
	}
}

func (s *stream) handleWAL(xld pglogrepl.XLogData) error {
	var err error
	s.ev, err = s.dec.Decode(xld.WALStart, xld.WALData)
	ev := &s.ev
	if decoder.IsBadRow(err) {
		var de *decoder.Error
		errors.As(err, &de)
		s.index++
		if !s.owns(de.Table, &de.Partial) {
			return nil
		}
		return s.park(&de.Partial, de.Table, xld.WALStart, err)
	}
	if err != nil {
		return fatal(fmt.Errorf("decode: %w", err))
	}
	switch ev.Kind {
	case decoder.KindBegin:
		s.led.Begin()
		s.stats.begin(ev.CommitTime)
		s.commit = ev.CommitTime
		s.final, s.index, s.txid = ev.FinalLSN, 0, ev.Xid
		killpoint.Hit("begin")
	case decoder.KindRow:
		index := s.index
		s.index++
		if index > 0 {
			killpoint.Hit("row.next")
		}
		if !s.owns(ev.Table, &ev.Message) {
			return nil
		}
		ev.Message.CommitTime = s.commit
		if why, ok := s.pinned(&ev.Message, xld.WALStart); ok {
			return s.park(&ev.Message, ev.Table, xld.WALStart, why)
		}
		if ev.Message.DeliverAt.After(s.commit) {
			return s.schedule(&ev.Message, ev.Table, xld.WALStart)
		}
		seq, err := s.publish(func(ctx context.Context) (uint64, error) {
			s.at(index)
			return s.pub.Publish(ctx, &ev.Message)
		})
		if errors.Is(err, wire.ErrUnpublishable) {
			return s.park(&ev.Message, ev.Table, xld.WALStart, err)
		}
		if err != nil {
			return publishFailed(fmt.Errorf("publish %s at %s: %w", ev.Message.AMQPMessageID(), xld.WALStart,
				s.refusedTooLarge(err, &ev.Message, xld.WALStart)))
		}
		if err := s.dispatch(seq, &ev.Message, xld.WALStart); err != nil {
			return err
		}
		s.stats.published()
		s.obs.Observe(Event{Kind: Published, Seq: seq, Message: &ev.Message, EventType: ev.Message.EventType})
		killpoint.Hit("publish.sent")
	case decoder.KindOtherMessage:
		s.index++ // a change of the transaction, whatever the message prefix (see Positioner)
	case decoder.KindCommit:
		s.led.Commit(ev.EndLSN)
		s.moved = s.led.Watermark()
		if s.xid == 0 || int32(s.txid-s.xid) > 0 {
			s.xid = s.txid
		}
		s.stats.received(ev.EndLSN)
		s.offer()
	}
	return nil
}

// errScheduledStream is why a stream's relay parks a message due after its commit.
var errScheduledStream = errors.New("deliver_at is later than the commit: a stream keeps commit order, " +
	"so scheduled delivery is for queues (docs/outbox.md#scheduled-delivery)")

// schedule hands m, due after its transaction's commit, to the Scheduler to hold until it is due.
// Its verdict moves the watermark like a broker's confirm. Both clocks are the server's: the commit
// time, and the sender's due check.
func (s *stream) schedule(m *wire.Message, table string, lsn pglogrepl.LSN) error {
	sc, ok := s.pub.(Scheduler)
	if !ok {
		return s.park(m, table, lsn, errScheduledStream)
	}
	seq, err := s.publish(func(ctx context.Context) (uint64, error) { return sc.Schedule(ctx, m) })
	if errors.Is(err, wire.ErrUnpublishable) {
		return s.park(m, table, lsn, err)
	}
	if err != nil {
		return publishFailed(fmt.Errorf("schedule %s at %s: %w", m.AMQPMessageID(), lsn, err))
	}
	if err := s.dispatch(seq, m, lsn); err != nil {
		return err
	}
	s.stats.Scheduled.Add(1)
	killpoint.Hit("schedule.handed")
	return nil
}

// publish hands a message to the broker through send (a Publish or a Park).
// A publish blocked by the broker is the phase "publish blocked".
// A memory or disk alarm blocks publishers, for example.
// The reporter sends the status updates that fall due meanwhile.
// Once the call has lasted a status interval, its context asks it to give up.
// The stream then applies the confirms that arrived meanwhile, so that the reporter reports them.
// Then it tries again.
// The publisher guarantees that a publish ended by its context while waiting wrote nothing.
// It also left the session usable.
// An error that says the session is gone ends the session here too, whatever else it wraps.
// Otherwise the retry would spin on a dead session.
func (s *stream) publish(send func(context.Context) (uint64, error)) (uint64, error) {
	defer s.stats.Blocked.Store(false)
	for {
		seq, waited, err := s.call(send)
		if !waited {
			return seq, err
		}
		s.stats.Blocked.Store(true)
		if err := s.drainConfirms(); err != nil {
			return 0, err
		}
	}
}

// at tells a Positioner where the row about to be published comes from.
func (s *stream) at(index int) {
	if p, ok := s.pub.(Positioner); ok {
		p.At(s.origin.TimelineAt(s.final), uint64(s.final), index)
	}
}

// errStatusDue is why a publish call's context ends when the call lasted a status interval.
var errStatusDue = errors.New("publish held up for a status interval")

// call makes one publish call, send, with a context that ends at the first of:
//   - a status interval (errStatusDue);
//   - the shutdown deadline;
//   - the session found over (connFailed).
//
// It reports whether the call only gave up at the end of the interval.
// The session is then alive and nothing was written.
// If the session was found over meanwhile, that is the error, whatever send returned.
// A relay that lost its replication connection must not publish any more.
func (s *stream) call(send func(context.Context) (uint64, error)) (seq uint64, waited bool, err error) {
	ctx := s.clock.start()
	seq, err = send(ctx)
	s.clock.done()
	var g connGone
	if errors.As(context.Cause(s.gone), &g) {
		return 0, false, g
	}
	waited = err != nil && errors.Is(err, ctx.Err()) && context.Cause(ctx) == errStatusDue &&
		!errors.Is(err, wire.ErrSessionClosed)
	return seq, waited, err
}

// over returns why the session may no longer write to the broker, or nil.
// The connection is gone, or the process stopped longer than the server waits for a status update (lapse.go).
// A Guarded publisher asks it right before each write.
func (s *stream) over() error {
	var g connGone
	if errors.As(context.Cause(s.gone), &g) {
		return g
	}
	if s.lapse != nil && !s.lapse.held() {
		s.connFailed(errLapsed)
		return connGone{errLapsed}
	}
	return nil
}

// park sets aside a row that can never become a deliverable message, so that the stream moves
// on. The parked copy is confirmed like any message: the slot passes the row only once the broker
// has it.
//
// A message the broker refused for its size is parked without its payload, which the broker would
// refuse again.
func (s *stream) park(m *wire.Message, table string, lsn pglogrepl.LSN, why error) error {
	p := &wire.Parked{Message: *m, Reason: why.Error(), Table: table, LSN: lsn.String(), Database: s.db}
	if _, ok := s.pinned(m, lsn); ok {
		p.Message.Payload, p.Size = nil, len(m.Payload)
	}
	seq, err := s.publish(func(ctx context.Context) (uint64, error) { return s.pub.Park(ctx, p) })
	if err != nil {
		return publishFailed(fmt.Errorf("park %s at %s: %w", m.AMQPMessageID(), lsn, s.refusedTooLarge(err, m, lsn)))
	}
	if err := s.dispatch(seq, m, lsn); err != nil {
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
func (s *stream) drainConfirms() error {
	select {
	case c, ok := <-s.pub.Confirms():
		return s.applyConfirms(c, ok)
	default:
		return nil
	}
}

// applyConfirms applies c and every confirm already waiting behind it, in one step.
// Each message is acked in the ledger and observed on its own.
// What depends only on the outcome is settled once for the batch.
// That is the watermark, the in-flight gauges and the next status update.
// A broker that acks many messages with one multiple ack costs the loop one turn, not one per message.
// The window bounds the batch: no more confirms can be waiting than messages in flight.
func (s *stream) applyConfirms(c wire.Confirm, ok bool) error {
	confirms := s.pub.Confirms()
	var last time.Time // when the last confirm applied arrived; zero while none was
	for {
		at, err := s.confirmOne(c, ok)
		if err != nil {
			if !last.IsZero() {
				s.settle(last)
			}
			return err
		}
		last = at
		select {
		case c, ok = <-confirms:
		default:
			s.settle(last)
			return nil
		}
	}
}

// confirmOne applies one confirm: the ledger's ack and the message's observation.
// It returns when the confirm arrived (now, if the publisher does not say).
func (s *stream) confirmOne(c wire.Confirm, ok bool) (time.Time, error) {
	if !ok {
		return time.Time{}, brokerError{errors.New("publisher: session closed")}
	}
	if c.Err != nil {
		f := s.led.Nack(c.Seq)
		s.obs.Observe(Event{Kind: ConfirmFailed, Seq: c.Seq, Err: c.Err})
		if c.Seq == 0 && errors.Is(c.Err, wire.ErrNotRecorded) { // the schedule's database refused a record
			return time.Time{}, brokerError{c.Err}
		}
		if c.Seq == 0 { // the session died
			return time.Time{}, brokerError{fmt.Errorf("broker did not confirm message %d: %w", c.Seq,
				s.refusedTooLarge(c.Err, nil, 0))}
		}
		return time.Time{}, brokerError{&refused{seq: c.Seq, key: f.key, err: c.Err}}
	}
	f, err := s.led.Ack(c.Seq)
	if err != nil {
		return time.Time{}, err
	}
	now := c.At
	if now.IsZero() {
		now = time.Now()
	}
	ev := Event{Kind: Confirmed, Seq: c.Seq, EventType: f.eventType, ConfirmLatency: now.Sub(f.at)}
	if !f.commit.IsZero() {
		ev.CommitLatency = now.Sub(f.commit)
		ev.PublishDelay = f.at.Sub(f.commit)
		ev.ReadDelay = f.read.Sub(f.commit)
		if !c.Written.IsZero() {
			ev.WriteDelay = c.Written.Sub(f.commit)
		}
	}
	s.obs.Observe(ev)
	s.passed(f.key)
	s.stats.confirmed()
	killpoint.Hit("confirm.acked")
	return now, nil
}

// settle brings what follows from the ledger up to date after confirms were applied.
// The last of them arrived at at.
// It updates the mark the reporter is offered, the in-flight gauges and the time of the last confirm.
func (s *stream) settle(at time.Time) {
	s.moved = s.led.Watermark()
	s.stats.LastConfirm.Store(at.UnixNano())
	s.updateInFlight()
	s.offer()
}

// offer hands the watermark to the reporter, if it moved.
func (s *stream) offer() {
	if m := (checkpoint.Mark{Watermark: s.led.Watermark(), Moved: s.moved, Xid: s.xid, Passed: s.led.Passed()}); m != s.offered {
		s.offered = m
		s.rep.offer(m)
	}
}

// dispatch records a published message, the row at lsn, in the ledger.
func (s *stream) dispatch(seq uint64, m *wire.Message, lsn pglogrepl.LSN) error {
	f := flight{at: time.Now(), read: s.read, commit: s.commit, eventType: m.EventType, key: keyOf(m, lsn)}
	if err := s.led.Dispatch(seq, f); err != nil {
		return err
	}
	s.unflushed = true
	s.updateInFlight()
	return nil
}

// updateInFlight publishes the in-flight count and the age of the oldest unconfirmed message.
func (s *stream) updateInFlight() {
	n := s.led.InFlight()
	s.stats.InFlight.Store(int64(n))
	if n == 0 {
		s.stats.OldestSent.Store(0)
		return
	}
	oldest, _ := s.led.Oldest()
	s.stats.OldestSent.Store(oldest.at.UnixNano())
}

// owns reports whether this relay publishes or parks m, decoded from table ("" for a logical decoding message).
// A row reached the slot through its shard's row filter already.
// But every slot receives every logical decoding message, whatever its publication.
// So a shard's relay keeps to the emitted messages whose aggregate id falls in its shard.
// The row filter would select the same.
// The same goes for a message to be parked (not transactional, or malformed).
// One shard's relay parks it, not each.
// One whose aggregate id could not be read goes where an empty one does.
func (s *stream) owns(table string, m *wire.Message) bool {
	return owns(table, m, s.cfg.Shards, s.cfg.Shard)
}

// connGone marks the end of a session found over during a publish call.
// The replication connection is gone or silent, or a check failed.
// The session ends on it, and it is no error of the broker's.
type connGone struct{ err error }

func (c connGone) Error() string { return c.err.Error() }
func (c connGone) Unwrap() error { return c.err }

// publishFailed wraps the error of a publish or park as the broker's, unless the session was
// found over meanwhile. The broker holding what the relay cannot continue from ends the relay.
func publishFailed(err error) error {
	var g connGone
	if errors.As(err, &g) {
		return g.err
	}
	if errors.Is(err, wire.ErrConflict) {
		return fatal(brokerError{err})
	}
	return brokerError{err}
}
