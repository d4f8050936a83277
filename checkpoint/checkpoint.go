package checkpoint

import (
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// ErrFailed is returned once a message was nacked: the tracker's watermark is frozen.
var ErrFailed = errors.New("checkpoint: a message was not confirmed")

// commit is a transaction boundary: every message dispatched up to and including lastSeq belongs to
// this transaction or an earlier one.
type commit struct {
	lastSeq uint64
	end     pglogrepl.LSN
}

// Tracker computes the confirmed-prefix watermark. The zero value is not usable; call New.
type Tracker struct {
	watermark  pglogrepl.LSN
	lastSeq    uint64          // highest sequence dispatched
	acked      uint64          // every sequence <= acked is acked
	early      map[uint64]bool // acks above acked+1, waiting for the gap to close
	commits    []commit        // pending commits in stream order; commits[head:] are live
	head       int
	open       bool
	failed     bool
	dispatched int // dispatched in the current session and not yet acked
}

// New returns a tracker whose watermark starts at start, the slot's confirmed_flush_lsn.
func New(start pglogrepl.LSN) *Tracker {
	return &Tracker{watermark: start, early: make(map[uint64]bool)}
}

// Begin records the start of a transaction in the stream.
func (t *Tracker) Begin() { t.open = true }

// Dispatch records that the message with sequence seq was handed to the broker. Sequences are
// the broker's delivery tags: 1, 2, 3, ... with no gaps.
func (t *Tracker) Dispatch(seq uint64) error {
	if seq != t.lastSeq+1 {
		return fmt.Errorf("checkpoint: dispatch %d after %d: sequences must be contiguous", seq, t.lastSeq)
	}
	t.lastSeq = seq
	t.dispatched++
	return nil
}

// Commit records the end of a transaction whose end LSN is end. The watermark may move to end once
// every message dispatched so far is acked.
func (t *Tracker) Commit(end pglogrepl.LSN) {
	t.open = false
	if n := len(t.commits); n > t.head && t.commits[n-1].lastSeq == t.lastSeq {
		// No message since the previous pending commit: the later end supersedes it.
		if end > t.commits[n-1].end {
			t.commits[n-1].end = end
		}
	} else {
		t.commits = append(t.commits, commit{lastSeq: t.lastSeq, end: end})
	}
	t.advance()
}

// Ack records the broker's positive confirm of seq.
func (t *Tracker) Ack(seq uint64) error {
	if seq <= t.acked || seq > t.lastSeq || t.early[seq] {
		return fmt.Errorf("checkpoint: ack %d is unknown or repeated", seq)
	}
	t.dispatched--
	if seq != t.acked+1 {
		t.early[seq] = true
		return nil
	}
	t.acked = seq
	for t.early[t.acked+1] {
		delete(t.early, t.acked+1)
		t.acked++
	}
	t.advance()
	return nil
}

// Nack records that seq will never be confirmed. The watermark stops where it is.
func (t *Tracker) Nack(uint64) {
	t.failed = true
}

// AdvanceIdle moves the watermark to lsn, a position up to which the server has sent everything, but only
// when nothing is in flight and no transaction is open. It reports whether the watermark moved.
func (t *Tracker) AdvanceIdle(lsn pglogrepl.LSN) bool {
	if t.failed || t.open || t.dispatched > 0 || len(t.commits) > t.head || lsn <= t.watermark {
		return false
	}
	t.watermark = lsn
	return true
}

// Watermark returns the highest position below which everything is confirmed.
func (t *Tracker) Watermark() pglogrepl.LSN { return t.watermark }

// InFlight returns how many dispatched messages await a confirm.
func (t *Tracker) InFlight() int { return t.dispatched }

// Span returns how many messages lie from the oldest unacked one to the newest dispatched: those
// in flight and those acked ahead of an older one still in flight. It is InFlight while confirms
// arrive in order; with confirms out of order (several publishing lanes) it is the bound that
// keeps what awaits the oldest confirm, early acks included, within a window.
func (t *Tracker) Span() int { return int(t.lastSeq - t.acked) }

// Acked returns the highest sequence up to which every message is acked.
func (t *Tracker) Acked() uint64 { return t.acked }

// Open reports whether a transaction has begun and not yet committed.
func (t *Tracker) Open() bool { return t.open }

// Failed reports whether a message was nacked.
func (t *Tracker) Failed() bool { return t.failed }

func (t *Tracker) advance() {
	if t.failed {
		return
	}
	for t.head < len(t.commits) && t.commits[t.head].lastSeq <= t.acked {
		if c := t.commits[t.head]; c.end > t.watermark {
			t.watermark = c.end
		}
		t.head++
	}
	if t.head == len(t.commits) {
		t.commits, t.head = t.commits[:0], 0
	} else if t.head > 1024 && t.head*2 > len(t.commits) {
		t.commits = append(t.commits[:0], t.commits[t.head:]...)
		t.head = 0
	}
}
