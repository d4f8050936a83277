package replication

import (
	"errors"
	"sync/atomic"
	"time"
)

// errLapsed means the relay went longer than its lapse bound without a status update: the
// process was stopped (SIGSTOP, a frozen VM) or starved that long. The server may have dropped
// the connection and given the slot to another relay, whose numbering a held batch would
// disturb, so the session publishes nothing more.
var errLapsed = errors.New("no status update sent for longer than the server lets a client be silent: " +
	"the process was stopped or starved, and the server may have given the slot to another relay")

// lapse tells whether the replication connection may still be the slot's holder. The server drops
// a client it has not heard from for wal_sender_timeout, and a standby relay then takes the slot.
// The reporter notes each status update it sends (sent); before each publish call the stream asks
// whether the session may still write (held). A gap longer than the bound between two status
// updates, or since the last one, ends the session for good, even once updates go out again: a
// relay stopped across a takeover must not write the batch it holds when it resumes.
//
// The bound is three quarters of wal_sender_timeout. A live reporter sends at least every status
// interval, and at once when the server asks, which it does at half of wal_sender_timeout.
// Times are nanoseconds on the monotonic clock, after the lapse's start.
type lapse struct {
	bound time.Duration // zero: the server never drops a silent client
	base  time.Time
	// until is when the connection stops being held without another status update; lapsed
	// once the bound was passed.
	until atomic.Int64
}

// lapsed marks a lapse in until. It is below every time, so no check passes once it is set.
const lapsed = -1 << 63

// newLapse returns a lapse for a server whose wal_sender_timeout is wst (zero or less: off),
// as if a status update was sent now.
func newLapse(wst time.Duration) *lapse {
	l := &lapse{base: time.Now()}
	if wst > 0 {
		l.bound = wst * 3 / 4
	}
	l.until.Store(int64(l.bound))
	return l
}

// sent notes a status update sent now.
func (l *lapse) sent() { l.sentAt(time.Since(l.base)) }

// held reports whether the session may still write to the broker.
func (l *lapse) held() bool { return l.heldAt(time.Since(l.base)) }

// sentAt notes a status update sent at now. A send after the bound passed marks the lapse first.
func (l *lapse) sentAt(now time.Duration) {
	if l.bound == 0 {
		return
	}
	for {
		until := l.until.Load()
		next := int64(now + l.bound)
		if until == lapsed {
			return
		}
		if int64(now) > until {
			next = lapsed
		}
		if l.until.CompareAndSwap(until, next) {
			return
		}
	}
}

// heldAt reports whether the session may still write at now.
func (l *lapse) heldAt(now time.Duration) bool {
	return l.bound == 0 || int64(now) <= l.until.Load()
}
