package replication

import "time"

// window is the one bound on the messages in flight (published or parked, not yet confirmed) and
// the record of them. The stream reads no more WAL while it is full (the phase windowFull), so
// no publish ever waits for room: not here, and not in the publisher, whose own bound (set from
// the same setting) is never reached.
//
// The count of messages in flight is the checkpoint tracker's; the window adds the limit
// (Config.Window, or one while a refused message stalls the stream, see stall.go) and what the
// relay remembers of each message until its confirm.
type window struct {
	flights []flight // ring indexed by sequence number
	stall   *stall
}

// flight remembers a message in flight, by sequence number, for the latencies of its confirm and
// for naming it if the broker refuses it.
type flight struct {
	at, commit time.Time
	read       time.Time // when the reader read the message's frame
	eventType  string
	key        msgKey
}

// newWindow returns a window of size messages; st is the relay's stall, kept across sessions.
func newWindow(size int, st *stall) window {
	// One more than size: confirms may come out of order, and the slot of the oldest message in
	// flight must survive the newest.
	return window{flights: make([]flight, size+1), stall: st}
}

// limit is how many messages may be in flight: one while stalled.
func (w *window) limit() int {
	if w.stall.active {
		return 1
	}
	return len(w.flights) - 1
}

func (w *window) put(seq uint64, f flight) { w.flights[seq%uint64(len(w.flights))] = f }
func (w *window) get(seq uint64) flight    { return w.flights[seq%uint64(len(w.flights))] }
