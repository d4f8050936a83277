package checkpoint

import (
	"time"

	"github.com/jackc/pglogrepl"
)

// Mark is a watermark the relay offers its reporter.
type Mark struct {
	// Watermark is the ledger's watermark.
	Watermark pglogrepl.LSN
	// Moved is where outbox transactions, not keepalives, last moved the watermark.
	Moved pglogrepl.LSN
	// Xid is the newest id among the session's outbox transactions, by PostgreSQL's circular order; 0 if none.
	Xid uint32
	// Passed counts the session's messages below the watermark (Ledger.Passed).
	// Every message is at or below Moved.
	Passed uint64
}

// ReportDelay is how often a Schedule looks at messages passed but not yet reported.
const ReportDelay = 100 * time.Millisecond

// IdleRecordStep is how far keepalives alone must move the watermark before it is recorded.
// It is more than the WAL of one record, a full page image included.
// It is little next to the WAL a slot retains.
const IdleRecordStep = 64 << 10

// IdleStep reports whether only keepalives moved the watermark from from to to.
// Outbox transactions last moved it to moved.
// A step under IdleRecordStep most likely passes only the relay's own last record.
// Recording it would write WAL for the next keepalive to carry, on an idle database for ever.
// So such a step is neither recorded nor reported.
func IdleStep(from, to, moved pglogrepl.LSN) bool {
	return to > from && moved <= from && to-from < IdleRecordStep
}

// maxCapped bounds the marks a Schedule keeps while a cap keeps reports back.
// Past it, the newest mark replaces the last one kept.
const maxCapped = 64

// Schedule decides when the relay reports its position to PostgreSQL.
// It is fed events and asked Due: "report now?".
// It does no I/O, reads no clock and takes no locks; its caller makes the calls one at a time.
//
// A report is due at once at the start, then every status interval.
// A keepalive that asks for a reply, and the end of a session, make one due at once (Request).
// Messages the watermark passed are reported sooner, at a look every ReportDelay.
// A look reports when the stream went quiet: no message passed since the look before.
// It also reports when a backlog passed since the mark the last report took.
// The backlog is half a window.
// A steady stream under that rate is reported once a status interval, not ten times a second.
// A burst is reported about two looks after it ends.
// What this leaves a killed relay to send again is in docs/reliability.md.
// Each report costs a coverage check and a registry write.
type Schedule struct {
	interval time.Duration
	backlog  uint64

	latest    Mark          // the mark offered last
	listen    bool          // Offer wakes the reporter: no messages are watched yet
	requested bool          // a report is wanted at once
	reported  pglogrepl.LSN // the position last sent
	covered   uint64        // the messages below the newest mark a sent position covered
	capped    []Mark        // marks reported but kept back by a cap, oldest first
	taken     uint64        // the messages below the mark the last report took, covered or not
	due       time.Time     // when the next report is due: a status interval after the last
	look      time.Time     // when to look again at the messages watched; zero while none are
	seen      uint64        // the messages below the watermark at the last look
}

// NewSchedule returns a schedule that starts at mark start, the slot's position.
// Its first report is due at once.
// The backlog is half of window messages, at least one.
func NewSchedule(start Mark, interval time.Duration, window int) *Schedule {
	return &Schedule{interval: interval, backlog: uint64(max(window/2, 1)), latest: start,
		listen: true, reported: start.Watermark, covered: start.Passed, taken: start.Passed}
}

// Offer records m as the latest mark.
// It returns true when the reporter should call Watch: it listens, and m has messages not reported.
// Once messages are watched, later offers wait for the next look.
// So a confirm costs no goroutine wake-up of its own.
// A mark moved only by keepalives, or by transactions without messages, waits for the interval.
func (s *Schedule) Offer(m Mark) bool {
	s.latest = m
	wake := s.listen && m.Passed != s.covered
	if wake {
		s.listen = false
	}
	return wake
}

// Latest returns the mark offered last.
func (s *Schedule) Latest() Mark { return s.latest }

// Reported returns the position last sent.
func (s *Schedule) Reported() pglogrepl.LSN { return s.reported }

// Watch starts watching the messages the watermark passed that no report covered, at now.
// The first look is ReportDelay later, unless the next report is due sooner.
// While nothing is to watch, the next Offer with messages wakes the reporter again.
func (s *Schedule) Watch(now time.Time) {
	m := s.latest
	nothing := m.Watermark <= s.reported || IdleStep(s.reported, m.Watermark, m.Moved) || m.Passed == s.covered
	s.listen = nothing
	if nothing || !s.look.IsZero() {
		return
	}
	s.seen = m.Passed
	if look := now.Add(min(ReportDelay, s.interval)); look.Before(s.due) {
		s.look = look
	}
}

// Request makes a report due at once: a keepalive asked for a reply, or the session ends.
func (s *Schedule) Request() { s.requested = true }

// Due reports whether a report is due at now.
// At a look that does not report, it sets the next look ReportDelay later.
func (s *Schedule) Due(now time.Time) bool {
	if s.requested || !now.Before(s.due) {
		return true
	}
	if s.look.IsZero() || now.Before(s.look) {
		return false
	}
	if s.ready() {
		return true
	}
	s.look = now.Add(ReportDelay)
	return false
}

// ready reports whether the messages watched are reported before the status interval.
// The stream went quiet since the last look, or it passed the backlog since the last report.
// That report may have been kept back by a cap.
// On a standby, each report sends the position the report before recorded.
// Reporting sooner would not pass such a cap.
// So the backlog counts from the mark taken, not from the messages covered.
func (s *Schedule) ready() bool {
	m := s.latest
	quiet := m.Passed == s.seen
	s.seen = m.Passed
	return quiet || m.Passed-s.taken >= s.backlog
}

// Sent records that a report took mark m and sent position w at now.
// The next report is due a status interval later; Sent then calls Watch.
func (s *Schedule) Sent(m Mark, w pglogrepl.LSN, now time.Time) {
	s.requested = false
	s.reported, s.taken = w, m.Passed
	s.cover(m, w)
	s.due, s.look = now.Add(s.interval), time.Time{}
	s.Watch(now)
}

// cover counts as reported the messages of the newest mark whose transactions end at or before w.
// A coverage cap, an idle step or a standby's replay may have kept w below m.
// Messages not yet in the slot still count towards the backlog.
func (s *Schedule) cover(m Mark, w pglogrepl.LSN) {
	if len(s.capped) < maxCapped {
		s.capped = append(s.capped, m)
	} else {
		s.capped[len(s.capped)-1] = m
	}
	i := 0
	for i < len(s.capped) && s.capped[i].Moved <= w {
		i++
	}
	if i > 0 {
		s.covered = s.capped[i-1].Passed
		s.capped = append(s.capped[:0], s.capped[i:]...)
	}
}

// Next returns when to ask Due again: the next report due or the next look, whichever is first.
func (s *Schedule) Next() time.Time {
	if !s.look.IsZero() && s.look.Before(s.due) {
		return s.look
	}
	return s.due
}
