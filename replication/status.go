package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
)

// statusTick runs when the status timer fires: it judges the server's silence and sends the
// status update that is due.
func (s *stream) statusTick() error {
	if err := s.checkHeard(); err != nil {
		return err
	}
	return s.maybeSendStatus()
}

// maybeSendStatus reports the watermark when the status update is due, and otherwise sets the
// timer for it.
func (s *stream) maybeSendStatus() error {
	if time.Now().Before(s.statusDue) {
		s.setDue(s.statusDue)
		return nil
	}
	return s.sendStatus()
}

// setDue makes the next status update due at t.
func (s *stream) setDue(t time.Time) {
	s.statusDue = t
	if s.statusTimer != nil {
		s.statusTimer.Reset(time.Until(t))
	}
}

// sendStatus reports the watermark as written, flushed and applied, capped at the last position
// the watch verified the publication for, after recording it in the registry: the slot is never
// ahead of the record by walbox's doing. The publication is checked again when the check is due or
// when the cap holds the watermark back. All three positions are set explicitly: pglogrepl would
// otherwise copy the write position into a zero flush position.
//
// This is the only place that sends a position to the server.
func (s *stream) sendStatus() error {
	ctx := context.Background()
	if time.Since(s.watch.checked) >= s.cfg.StatusInterval {
		if err := s.watch.check(ctx); err != nil {
			return err
		}
	}
	// A watermark held back by the cap takes a check whose predecessor read a position past it:
	// at most two more, one round trip each.
	for i := 0; i < 2 && s.led.Watermark() > s.watch.limit; i++ {
		if err := s.watch.check(ctx); err != nil {
			return err
		}
	}
	w := min(s.led.Watermark(), s.watch.limit)
	if s.idleStep(s.watch.recorded, w) {
		w = s.watch.recorded
	}
	if err := s.watch.record(ctx, w); err != nil {
		return err
	}
	if err := s.connectionLost(); err != nil {
		// pgconn closes a connection whose read failed from a goroutine of its own, writing to
		// it as it goes: a status update now would race with that, and is lost anyway.
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
	s.setDue(s.statusSent.Add(s.cfg.StatusInterval))
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
	if w := s.led.Watermark(); w <= s.reported || s.idleStep(s.reported, w) {
		return
	}
	if soon := s.statusSent.Add(min(reportDelay, s.cfg.StatusInterval)); soon.Before(s.statusDue) {
		s.setDue(soon)
	}
}

// connectionLost returns the error that ended the reader, if reading ended because the
// connection failed (not because the stream stopped the reader to use the connection itself).
func (s *stream) connectionLost() error {
	if s.reader == nil {
		return nil
	}
	if err := s.reader.failure(); err != nil && !errors.Is(err, errReaderStopped) {
		return err
	}
	return nil
}
