package replication

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/wire"
)

// Relay moves outbox rows from the slot to the broker. Create it with New and call Run once.
type Relay struct {
	cfg   Config
	stats Stats
	// dbReached and brokerReached record that each server answered once.
	// Until then a connection failure is taken for a configuration error, and ends Run.
	// Afterwards it is an outage to wait out.
	dbReached, brokerReached bool
	// watched is set by a session that awaited the slot's release (awaitRelease).
	watched bool
	// silence is the last session's silence bound (see silenceBound); zero before the first.
	silence time.Duration
	// stall remembers a message the broker refused, across sessions (see stall.go).
	stall stall
	// coverage is what the first check of the publication found (see watch.identity).
	coverage string
	// server is the server and timeline of the last session, "" before the first.
	server   string
	timeline int32
}

// New fills in cfg's defaults, validates it and returns a Relay.
func New(cfg Config) (*Relay, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Relay{cfg: cfg}, nil
}

// Stats returns the relay's live counters.
func (r *Relay) Stats() *Stats { return &r.stats }

// Run relays until ctx ends, starting a new session after each retryable error. It returns nil
// after a graceful shutdown and an error when a problem cannot be fixed by retrying.
func (r *Relay) Run(ctx context.Context) (err error) {
	log := r.cfg.Logger
	backoff := newBackoff(r.cfg.MaxBackoff)
	var quiet repeats
	defer func() {
		if err != nil {
			r.stats.State.Store(int32(StateFailed))
		} else {
			r.stats.State.Store(int32(StateStopped))
		}
	}()
	for {
		if State(r.stats.State.Load()) != StateStandby {
			r.stats.State.Store(int32(r.unlessStalled(StateStarting)))
		}
		began := r.stats.Sessions.Load()
		progressed, err := r.session(ctx)
		if r.stats.Sessions.Load() != began {
			quiet = repeats{} // a session streamed: the next outage's first error is news
		}
		r.endSession(err)
		if r.noteStall(err) {
			progressed = true // the next session parks a row, or looks for it: no reason to wait
		}
		if !retryable(err) && !endedBy(ctx, err) {
			// Even when ctx ended too: a problem that retrying cannot fix must not pass for a
			// graceful stop.
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		wait := backoff.after(err, progressed)
		if errors.Is(err, ErrSlotActive) {
			wait = r.cfg.StandbyRetry
			if r.watched {
				wait = 0 // the session watched the slot for as long already
			}
			r.watched = false
			r.standby(err)
		} else {
			r.stats.State.Store(int32(r.unlessStalled(StateRetrying)))
			if !unreached(err) || quiet.say(err) {
				log.Warn("session ended; starting again from the slot", "slot", r.cfg.Slot, "error", err, "retry_in", wait)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// endedBy reports whether err only says that ctx ended.
func endedBy(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// endSession records how a session ended: messages still in flight will be sent again.
func (r *Relay) endSession(err error) {
	r.cfg.Observer.Observe(Event{Kind: SessionEnded, Err: err, Retried: int(r.stats.InFlight.Load())})
	r.stats.setLastError(err)
	r.stats.InFlight.Store(0)
	r.stats.OldestSent.Store(0)
}

// session runs one session: connect, check, start at the slot's position, stream.
// It reports whether the slot moved forward in it.
// A failure that recurs at the same message then backs off.
// It does not replay from the slot again and again at full speed.
func (r *Relay) session(ctx context.Context) (progressed bool, err error) {
	limit := r.setupTimeout()
	sctx, endSetup := context.WithTimeout(ctx, limit)
	defer endSetup()
	defer func() { err = setupExpired(ctx, sctx, limit, err) }()
	conn, heard, err := connectHeard(sctx, r.cfg.replicationURL())
	if err != nil {
		return false, r.firstContact(err, &r.dbReached)
	}
	r.dbReached = true
	defer conn.Close(context.Background())
	if err := checkReplicationServer(&r.cfg, conn); err != nil {
		return false, err
	}

	sys, err := pglogrepl.IdentifySystem(sctx, conn)
	if err != nil {
		return false, fmt.Errorf("identify system: %w", err)
	}
	if _, err := r.cfg.FailoverSlot.Wanted(slots.ServerMajor(conn)); err != nil {
		return false, fatal(err)
	}
	r.noteServer(conn, sys)
	origin, err := readOrigin(sctx, conn, sys)
	if err != nil {
		return false, err
	}
	w, err := openWatch(sctx, &r.cfg, sys.Timeline, &r.coverage)
	if err != nil {
		return false, err
	}
	defer w.close()
	defer func() { err = r.noteStop(w, err) }()
	if err := w.checkOneServer(sctx, conn, sys); err != nil {
		return false, err
	}
	// The same inspection, and the same judgement, as walbox doctor's.
	srv, err := inspect.ReadServer(sctx, w.conn)
	if err != nil {
		return false, err
	}
	if err := srv.CheckWalLevel(); err != nil {
		return false, fatal(err)
	}
	if err := w.check(sctx); err != nil {
		return false, err
	}
	for _, m := range r.cfg.Mappings {
		if _, err := inspect.CheckTable(sctx, w.conn, m); err != nil {
			return false, fatal(err)
		}
	}
	if err := shard.CheckPositionPublication(sctx, w.conn, r.cfg.Publication, r.cfg.Mappings); err != nil {
		if errors.Is(err, shard.ErrPositionIDs) {
			err = fatal(err)
		}
		return false, err
	}
	if err := checkEmit(sctx, w.conn, &r.cfg); err != nil {
		return false, err
	}
	// The walsender's own wal_sender_timeout: with --replication-url it runs on another server,
	// and a connection may set its own. The SQL connection's may be far longer.
	wst, err := senderTimeout(sctx, conn)
	if err != nil {
		return false, err
	}
	silence := r.serverSilence(wst)
	slot, err := r.prepareSlot(sctx, conn, w, sys)
	if errors.Is(err, ErrSlotActive) {
		if err = r.standbyReach(sctx, err); errors.Is(err, ErrSlotActive) {
			r.standby(err)
			r.watched = r.awaitRelease(sctx, w.slotDB(), limit/2)
		}
		return false, err
	}
	if err != nil {
		return false, err
	}
	if err := w.pinCoverage(sctx); err != nil {
		return false, err
	}
	pub, err := r.cfg.Dial(sctx)
	if err != nil {
		return false, r.firstContact(brokerError{fmt.Errorf("connect to broker: %w", err)}, &r.brokerReached)
	}
	r.brokerReached = true
	var clock *stopClock // the stream's, once it has run
	defer func() { r.closePublisher(ctx, pub, clock) }()
	if b, ok := pub.(SystemBound); ok {
		if err := b.Bind(sctx, origin.SystemID, sys.DBName); err != nil {
			return false, bindError(err)
		}
	}
	if err := checkAnchor(sctx, conn, pub, origin, r.cfg.ReplicationURL != ""); err != nil {
		return false, anchorError(err)
	}

	if err := start(sctx, conn, r.cfg.Slot, r.cfg.Publication, r.askMessages(conn, pub), slot.ConfirmedFlush); err != nil {
		return false, err
	}
	// The session holds the slot from here on, and nothing else moves it.
	// What must be read against the slot's position is read after this check.
	if slot, err = r.checkHeld(sctx, conn, w, slot); err != nil {
		return false, err
	}
	w.limit, w.replayed = slot.ConfirmedFlush, slot.ConfirmedFlush
	if err := anchorMoved(sctx, pub); err != nil {
		return false, err
	}
	endSetup()
	if State(r.stats.State.Load()) == StateStandby {
		killpoint.Hit("standby.took")
	}
	r.stats.Sessions.Add(1)
	r.stats.Streaming.Store(true)
	st := r.unlessStalled(StateStreaming)
	r.stats.State.Store(int32(st))
	if st == StateStreaming {
		r.stats.clearLastError() // the error that ended the last session is over
	}
	defer r.stats.Streaming.Store(false)
	r.cfg.Logger.Info("streaming", "slot", r.cfg.Slot, "lsn", slot.ConfirmedFlush.String())

	s := &stream{
		cfg:     &r.cfg,
		log:     r.cfg.Logger,
		conn:    conn,
		watch:   w,
		pub:     pub,
		dec:     decoder.New(r.cfg.Mappings...).WithMessagePrefix(r.cfg.messagePrefix()).WithCanary(r.cfg.Canary).WithSharedPayload(),
		led:     newLedger(slot.ConfirmedFlush, r.cfg.Window, &r.stall),
		stall:   &r.stall,
		start:   slot.ConfirmedFlush,
		heard:   heard,
		silence: silence,
		lapse:   newLapse(wst),
		stats:   &r.stats,
		obs:     r.cfg.Observer,
		origin:  origin,
		db:      wire.ParkedBy(strconv.FormatUint(origin.SystemID, 10), sys.DBName),
	}
	s.dec.SetOrigin(origin)
	err = s.run(ctx)
	clock = s.stop
	if err != nil && ctx.Err() != nil {
		s.gaveUp(err) // a graceful stop that a publish call or a failure cut short
	}
	return s.led.Watermark() > slot.ConfirmedFlush, err
}

// standbyReach dials the broker once while the relay waits as a standby (err), then closes it.
// A standby that never reached the broker would take an outage at takeover for a wrong URL, and
// stop. The first dial, at start, tells the two apart, as it does for a relay that streams at once.
func (r *Relay) standbyReach(ctx context.Context, err error) error {
	if r.brokerReached {
		return err
	}
	pub, derr := r.cfg.Dial(ctx)
	if derr != nil {
		return r.firstContact(brokerError{fmt.Errorf("connect to broker: %w", derr)}, &r.brokerReached)
	}
	r.brokerReached = true
	_ = pub.Close()
	return err
}

// standby marks the relay a standby. It says so once, not at every retry.
func (r *Relay) standby(err error) {
	if State(r.stats.State.Swap(int32(StateStandby))) != StateStandby {
		r.cfg.Logger.Info("standby: slot is in use by another process; taking over when it is free", "slot", r.cfg.Slot, "error", err)
	}
}

// releaseLook is how often a standby reads whether the slot is still held.
const releaseLook = 100 * time.Millisecond

// awaitRelease reads the slot every releaseLook until no process holds it. It stops after
// StandbyRetry (most at the longest), when ctx ends, or when a read fails. So a standby takes over
// within moments of the release, yet connects once a StandbyRetry as before. It reports whether it
// watched to the end: the caller then starts a session at once.
func (r *Relay) awaitRelease(ctx context.Context, db inspect.Querier, most time.Duration) bool {
	deadline := time.Now().Add(min(r.cfg.StandbyRetry, most))
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(releaseLook):
		}
		info, err := inspect.ReadSlot(ctx, db, r.cfg.Slot)
		if err != nil {
			return false
		}
		if !info.Active {
			return true
		}
	}
	return true
}

// noteServer logs the server a session connected to when it is not the last session's.
// After a promotion, that is the new primary and its timeline.
func (r *Relay) noteServer(conn *pgconn.PgConn, sys pglogrepl.IdentifySystemResult) {
	server := conn.Conn().RemoteAddr().String()
	if r.server != "" && (server != r.server || sys.Timeline != r.timeline) {
		r.cfg.Logger.Warn("connected to another server than the last session's (a failover?)", "slot", r.cfg.Slot,
			"server", server, "timeline", sys.Timeline, "previous_server", r.server, "previous_timeline", r.timeline)
	}
	r.server, r.timeline = server, sys.Timeline
}

// firstContact makes a connection failure permanent when the server was never reached.
// It does not when the relay is configured to wait for it.
// A server that answered with a refusal was reached.
// That failure is permanent too, without the advice about its address.
func (r *Relay) firstContact(err error, reached *bool) error {
	switch {
	case *reached || r.cfg.WaitForServers || !retryable(err):
		return err
	case errors.Is(err, wire.ErrServerAnswered), answeredByPostgres(err):
		return fatal(err)
	}
	return fatal(fmt.Errorf("%w (never reached since start; check the URL, or set wait-for-servers)", err))
}

// answeredByPostgres reports whether err carries the server's own error, a refused login say.
func answeredByPostgres(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

// prepareSlot compares the slot with its record and readies it to stream from (slots.Prepare).
// It creates the slot only where nothing was ever recorded.
// It refuses a slot that is missing though recorded, or ahead of the recorded position.
// It also refuses a slot recorded on another system, or one this relay stopped on.
func (r *Relay) prepareSlot(ctx context.Context, conn *pgconn.PgConn, w *watch, sys pglogrepl.IdentifySystemResult) (inspect.Slot, error) {
	p, err := slots.Prepare(ctx, slots.PrepareConfig{Slot: r.cfg.Slot, Conn: conn, Primary: w.conn, SlotDB: w.slotDB(),
		Registry: w.reg, System: sys, Create: *r.cfg.CreateSlot, Failover: r.cfg.FailoverSlot, Xmin: w.xminAt})
	if p.Adopted {
		r.cfg.Logger.Info("recorded the replication slot in the registry", "slot", r.cfg.Slot,
			"lsn", p.Slot.ConfirmedFlush.String(), "registry", w.reg.Table())
	}
	if err != nil {
		return p.Slot, r.slotError(err)
	}
	w.recorded = p.Recorded
	if p.Created {
		r.cfg.Logger.Warn("created the missing replication slot; rows committed before it are not covered (run `walbox migrate` ahead of time to avoid this)",
			"slot", r.cfg.Slot, "lsn", p.Recorded.String())
	}
	if p.MadeFailover {
		r.cfg.Logger.Info("made the replication slot a failover slot (--failover-slot)", "slot", r.cfg.Slot)
	}
	return p.Slot, nil
}

// checkHeld reads the slot again once the session holds it (slots.CheckHeld).
// A role with REPLICATION may have advanced it between prepareSlot's check and START_REPLICATION.
// The server then streams from the advanced position.
// It returns the slot as held: the position the server streams from.
// That is the checked one, or one moved no further than the record.
func (r *Relay) checkHeld(ctx context.Context, conn *pgconn.PgConn, w *watch, checked inspect.Slot) (inspect.Slot, error) {
	pid := w.walsender
	if pid == 0 {
		pid = conn.PID()
	}
	held, err := slots.CheckHeld(ctx, slots.HeldConfig{Slot: r.cfg.Slot, PID: pid, SlotDB: w.slotDB(),
		Registry: w.reg, Checked: checked})
	if err != nil {
		return checked, r.slotError(err)
	}
	if held.ConfirmedFlush < checked.ConfirmedFlush {
		held.ConfirmedFlush = checked.ConfirmedFlush // the server starts at the later of the two
	}
	if held.ConfirmedFlush != checked.ConfirmedFlush {
		r.cfg.Logger.Warn("the slot moved between its check and START_REPLICATION, within what walbox recorded; streaming from there",
			"slot", r.cfg.Slot, "checked", checked.ConfirmedFlush.String(), "lsn", held.ConfirmedFlush.String())
	}
	return held, nil
}

// slotError makes the errors of slots.Prepare and slots.CheckHeld that retrying cannot fix
// permanent: a recorded stop names its way out.
func (r *Relay) slotError(err error) error {
	var stop *slots.StopRecorded
	switch {
	case errors.As(err, &stop):
		return fatal(stopError(r.cfg.Slot, stop.Stop, r.wayOut()))
	case slots.Refused(err):
		return fatal(err)
	}
	return err
}

// maxReconnect caps the wait after a failed connection to PostgreSQL. A refused or starting server
// costs nothing to ask again. After a restart the relay, and so the scheduled messages, are back
// within it.
const maxReconnect = time.Second

// unreached reports whether err says PostgreSQL could not be reached, or is not ready yet. A server
// that answered otherwise (a refused login, too many connections) is asked again with the backoff.
func unreached(err error) bool {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return false
	}
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr) || pgErr.Code == "57P03" // cannot_connect_now: starting up or in recovery
}

// repeats keeps the log of an unreachable server short: the same error again within a minute is
// not logged.
type repeats struct {
	last string
	at   time.Time
}

// say reports whether err is worth a log line, and notes it.
func (q *repeats) say(err error) bool {
	msg, now := fmt.Sprint(err), time.Now()
	if msg == q.last && now.Sub(q.at) < time.Minute {
		return false
	}
	q.last, q.at = msg, now
	return true
}

// backoff grows exponentially with jitter up to max, and starts over after a session that moved
// the slot.
type backoff struct {
	max, cur time.Duration
}

func newBackoff(max time.Duration) *backoff { return &backoff{max: max} }

// after returns the wait after a session that ended with err. It is at most maxReconnect when
// PostgreSQL could not be reached.
func (b *backoff) after(err error, progressed bool) time.Duration {
	wait := b.next(progressed)
	if unreached(err) {
		wait = min(wait, maxReconnect)
	}
	return wait
}

func (b *backoff) next(progressed bool) time.Duration {
	if progressed || b.cur == 0 {
		b.cur = 100 * time.Millisecond
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur/2 + rand.N(b.cur/2+1)
}

// askMessages reports whether the session asks the server for logical decoding messages.
// It does with a message prefix.
// It also does for a Positioner or a canary, whatever the prefix, on PostgreSQL 14+ (which can send them).
// A row's index counts the transaction's messages of every prefix.
// So a prefix changed between two sessions numbers the rows of a transaction the same way.
func (r *Relay) askMessages(conn *pgconn.PgConn, pub Publisher) bool {
	if r.cfg.messagePrefix() != "" {
		return true
	}
	_, positioned := pub.(Positioner)
	return (positioned || r.cfg.Canary != "") && slots.ServerMajor(conn) >= 14
}
