package checkpoint

import (
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// ErrFull is returned by Dispatch when the window holds as many messages as it may.
var ErrFull = errors.New("checkpoint: the window is full")

// commit is a transaction boundary.
// Every message dispatched up to and including lastSeq belongs to this transaction or an earlier one.
type commit struct {
	lastSeq uint64
	end     pglogrepl.LSN
}

// Ledger is the one record of the messages in flight.
// It bounds them: a window of at most SetLimit messages, counted from the oldest unconfirmed one.
// It keeps a value of the caller's for each until its verdict.
// It turns the verdicts into the watermark.
// The zero value is not usable; call NewLedger.
type Ledger[T any] struct {
	watermark  pglogrepl.LSN
	passed     uint64          // every sequence <= passed lies below the watermark
	lastSeq    uint64          // highest sequence dispatched
	acked      uint64          // every sequence <= acked is acked
	early      map[uint64]bool // acks above acked+1, waiting for the gap to close
	commits    []commit        // pending commits in stream order; commits[head:] are live
	head       int
	open       bool
	failed     bool
	dispatched int // dispatched and not yet acked

	entries []T // ring indexed by sequence number: the value of each message in the window
	limit   int
}

// NewLedger returns a ledger whose watermark starts at start, the slot's confirmed_flush_lsn, and
// whose window holds up to size messages.
func NewLedger[T any](start pglogrepl.LSN, size int) *Ledger[T] {
	size = max(size, 1)
	// One more entry than size: confirms may come out of order.
	// The entry of the oldest message in flight must survive the newest.
	return &Ledger[T]{watermark: start, early: make(map[uint64]bool), entries: make([]T, size+1), limit: size}
}

// SetLimit narrows the window to n messages (at least one), or widens it back up to its size.
func (l *Ledger[T]) SetLimit(n int) { l.limit = min(max(n, 1), len(l.entries)-1) }

// Full reports whether the window holds as many messages as it may: Dispatch would fail.
func (l *Ledger[T]) Full() bool { return l.Span() >= l.limit }

// Begin records the start of a transaction in the stream.
func (l *Ledger[T]) Begin() { l.open = true }

// Dispatch records that the message with sequence seq, whose value is v, was handed to the
// broker. Sequences are the publisher's: 1, 2, 3, ... with no gaps. It fails with ErrFull, recording
// nothing, when the window is full.
func (l *Ledger[T]) Dispatch(seq uint64, v T) error {
	if seq != l.lastSeq+1 {
		return fmt.Errorf("checkpoint: dispatch %d after %d: sequences must be contiguous", seq, l.lastSeq)
	}
	if l.Full() {
		return ErrFull
	}
	l.lastSeq = seq
	l.dispatched++
	l.entries[seq%uint64(len(l.entries))] = v
	return nil
}

// Commit records the end of a transaction whose end LSN is end. The watermark may move to end once
// every message dispatched so far is acked.
func (l *Ledger[T]) Commit(end pglogrepl.LSN) {
	l.open = false
	if n := len(l.commits); n > l.head && l.commits[n-1].lastSeq == l.lastSeq {
		// No message since the previous pending commit: the later end supersedes it.
		if end > l.commits[n-1].end {
			l.commits[n-1].end = end
		}
	} else {
		l.commits = append(l.commits, commit{lastSeq: l.lastSeq, end: end})
	}
	l.advance()
}

// Ack records the broker's positive confirm of seq and returns the value dispatched with it.
func (l *Ledger[T]) Ack(seq uint64) (T, error) {
	var zero T
	if seq <= l.acked || seq > l.lastSeq || l.early[seq] {
		return zero, fmt.Errorf("checkpoint: ack %d is unknown or repeated", seq)
	}
	v := l.get(seq)
	l.dispatched--
	if seq != l.acked+1 {
		l.early[seq] = true
		return v, nil
	}
	l.acked = seq
	for l.early[l.acked+1] {
		delete(l.early, l.acked+1)
		l.acked++
	}
	l.advance()
	return v, nil
}

// Nack records that seq will never be confirmed and returns the value dispatched with it.
// For a sequence outside the window it returns the zero value.
// The watermark stops where it is, for good.
func (l *Ledger[T]) Nack(seq uint64) T {
	l.failed = true
	if seq <= l.acked || seq > l.lastSeq {
		var zero T
		return zero
	}
	return l.get(seq)
}

// get returns the value dispatched with seq.
// It must be in the window: from the oldest unacked message to the newest dispatched.
func (l *Ledger[T]) get(seq uint64) T { return l.entries[seq%uint64(len(l.entries))] }

// Oldest returns the value of the oldest message not yet acked, if any is in flight.
func (l *Ledger[T]) Oldest() (T, bool) {
	if l.dispatched == 0 {
		var zero T
		return zero, false
	}
	return l.get(l.acked + 1), true
}

// Newest returns the sequence and value of the newest message dispatched, if the window holds any.
func (l *Ledger[T]) Newest() (uint64, T, bool) {
	if l.Span() == 0 {
		var zero T
		return 0, zero, false
	}
	return l.lastSeq, l.get(l.lastSeq), true
}

// AdvanceIdle moves the watermark to lsn, a position up to which the server has sent everything.
// It moves it only when nothing is in flight and no transaction is open.
// It reports whether the watermark moved.
func (l *Ledger[T]) AdvanceIdle(lsn pglogrepl.LSN) bool {
	if l.failed || l.open || l.dispatched > 0 || len(l.commits) > l.head || lsn <= l.watermark {
		return false
	}
	l.watermark = lsn
	return true
}

// Watermark returns the highest position below which everything is confirmed.
func (l *Ledger[T]) Watermark() pglogrepl.LSN { return l.watermark }

// Passed returns how many messages the watermark has passed: those of the transactions whose end
// it reached. Messages confirmed in a transaction not yet committed or passed do not count.
func (l *Ledger[T]) Passed() uint64 { return l.passed }

// InFlight returns how many dispatched messages await a confirm.
func (l *Ledger[T]) InFlight() int { return l.dispatched }

// Span returns how many messages lie from the oldest unacked one to the newest dispatched.
// Those are the messages in flight, and those acked ahead of an older one still in flight.
// It is InFlight while confirms arrive in order.
// With confirms out of order (several publishing lanes), it is what the window bounds, early acks included.
func (l *Ledger[T]) Span() int { return int(l.lastSeq - l.acked) }

// Open reports whether a transaction has begun and not yet committed.
func (l *Ledger[T]) Open() bool { return l.open }

func (l *Ledger[T]) advance() {
	if l.failed {
		return
	}
	for l.head < len(l.commits) && l.commits[l.head].lastSeq <= l.acked {
		c := l.commits[l.head]
		if c.end > l.watermark {
			l.watermark = c.end
		}
		l.passed = max(l.passed, c.lastSeq)
		l.head++
	}
	if l.head == len(l.commits) {
		l.commits, l.head = l.commits[:0], 0
	} else if l.head > 1024 && l.head*2 > len(l.commits) {
		l.commits = append(l.commits[:0], l.commits[l.head:]...)
		l.head = 0
	}
}
