package replication

import (
	"errors"
	"sync/atomic"
	"time"
)

// errLapsed means the relay went longer than its lapse bound without a status update.
// The process was stopped (SIGSTOP, a frozen VM) or starved that long.
// The server may have dropped the connection and given the slot to another relay.
// A batch this relay kept would disturb that relay's numbering, so the session publishes nothing more.
var errLapsed = errors.New("no status update sent for longer than the server lets a client be silent: " +
	"the process was stopped or starved, and the server may have given the slot to another relay")

// lapse tells whether the replication connection may still hold the slot.
// The server drops a client it has not heard from for wal_sender_timeout.
// A standby relay then takes the slot.
// The reporter notes each status update it sends (sent).
// Before each publish call the stream asks whether the connection still holds the slot (held).
// A gap longer than the bound between two status updates, or since the last one, ends the session.
// It ends it for good, even once updates go out again.
// A relay stopped across a takeover must not write the batch it has when it resumes.
//
// The bound is three quarters of wal_sender_timeout.
// A live reporter sends at least every status interval, or every third of the bound if sooner.
// It also sends at once when the server asks, at half of wal_sender_timeout (reportEvery).
// Times are nanoseconds on the monotonic clock, after the lapse's start.
type lapse struct {
	bound time.Duration // zero: the server never drops a silent client
	base  time.Time
	// until is when the connection stops holding the slot without another status update.
	// It is lapsed once the bound was passed.
	until atomic.Int64
}

// lapsed marks a lapse in until. It is below every time, so no check passes once it is set.
const lapsed = -1 << 63

// newLapse returns a lapse for a server whose wal_sender_timeout is wst (zero or less: off).
// It starts as if a status update was sent now.
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

// held reports whether the connection may still hold the slot: the session may still write to the broker.
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
