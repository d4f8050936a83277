package publisher

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of what a coalescing connection holds back. It writes once coalesceBytes are held, or
// coalesceDelay after the first of them was held. Whichever comes first counts. A Session.Flush
// waits for more only while the next message is expected soon after the first held (expectMore).
const coalesceBytes = 64 << 10

var coalesceDelay = 2500 * time.Microsecond // a variable for tests

// coalescer is the net.Conn under amqp091. The library amqp091 flushes its buffer to the socket
// after every publish. So each message would be a TCP write of its own and wake the broker on its
// own. While the session publishes (hold), the coalescer keeps those writes and sends them
// together. It sends them at the first of these:
//   - the caller has nothing more to publish for now (Session.Flush), and no more is expected soon;
//   - coalesceBytes are held;
//   - coalesceDelay passed since the first byte was held.
//
// Every other write goes out at once, after what is held: heartbeats, channel setup, declarations,
// close. So nothing waits behind a publish burst, and the byte order of the stream is kept.
//
// The coalescer also notes when each publish's frames reached the socket (holdFor, writtenAt). That
// is the end of the socket write that carried the last of them. A Confirm carries it as Written.
//
// A held write reports success to amqp091 before it reaches the socket. A write that flushSoon (or
// the timer) makes may fail. Then failed is called, and every later write returns the error. The
// session cuts the connection and fails, as for a write amqp091 saw fail. Each socket write keeps
// its own deadline (writeBound). So a broker that stops reading still has the connection cut.
type coalescer struct {
	net.Conn
	failed func(error) error

	delay time.Duration

	writing atomic.Bool // a socket write is in progress; read without mu

	mu     sync.Mutex
	writes int // socket writes made
	hold   bool
	buf    []byte
	first  time.Time     // when the first byte in buf was held
	idle   time.Time     // when flushSoon was last called
	gap    time.Duration // the time between flushSoon calls, a moving average
	calls  int           // flushSoon calls that found buf as it is held now
	lone   bool          // the last write of held bytes carried those of one flushSoon call
	armed  bool          // the timer is set to write what is held
	timer  *time.Timer
	err    error // the first failed write; sticky

	// When publishes reached the socket:
	//   - tag is the publish whose frames are being written (0 between publishes);
	//   - last is the latest publish whose frames are all written or held;
	//   - carried lists the socket writes since that completed publishes, oldest first. writtenAt
	//     has not taken them yet.
	tag, last uint64
	stamped   uint64 // the latest publish in carried
	carried   []carriedUpTo
}

// carriedUpTo is a socket write that ended at at and completed the publishes up to upTo.
type carriedUpTo struct {
	upTo uint64
	at   time.Time
}

func newCoalescer(c net.Conn, failed func(error) error) *coalescer {
	w := &coalescer{Conn: c, failed: failed, delay: coalesceDelay, gap: coalesceDelay}
	w.timer = time.AfterFunc(time.Hour, func() { _ = w.writeNow() })
	w.timer.Stop()
	return w
}

func (w *coalescer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, w.err
	}
	if !w.hold {
		if len(w.buf) == 0 {
			return w.write(p)
		}
		w.buf = append(w.buf, p...)
		if _, err := w.flush(); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if len(w.buf) == 0 {
		w.first, w.calls = time.Now(), 0
	}
	w.buf = append(w.buf, p...)
	if len(w.buf) >= coalesceBytes {
		if _, err := w.flush(); err != nil {
			return 0, err
		}
	} else if !w.armed {
		w.armed = true
		w.timer.Reset(w.delay)
	}
	return len(p), nil
}

// holding sets whether writes are held (true while a publish writes its frames).
func (w *coalescer) holding(on bool) {
	w.mu.Lock()
	w.hold = on
	if !on && w.tag != 0 {
		w.done()
	}
	w.mu.Unlock()
}

// holdFor holds the writes of publish tag (a delivery tag, above those before it) until holding(false).
func (w *coalescer) holdFor(tag uint64) {
	w.mu.Lock()
	w.hold, w.tag = true, tag
	w.mu.Unlock()
}

// done ends the publish of w.tag, whose frames are all written or held; w.mu is held.
func (w *coalescer) done() {
	w.last, w.tag = w.tag, 0
	if len(w.buf) == 0 && w.last > w.stamped {
		w.stamp(w.last, time.Now()) // its last frames went out during the publish
	}
}

// stamp records that a socket write ending at at completed the publishes up to upTo; w.mu is held.
func (w *coalescer) stamp(upTo uint64, at time.Time) {
	if upTo <= w.stamped {
		return
	}
	w.stamped = upTo
	w.carried = append(w.carried, carriedUpTo{upTo: upTo, at: at})
}

// writtenAt returns when the last frame of publish tag was written to the socket, zero if it was
// not. Call it for each publish in order: it forgets the writes before tag.
func (w *coalescer) writtenAt(tag uint64) time.Time {
	if w == nil {
		return time.Time{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	i := 0
	for i < len(w.carried) && w.carried[i].upTo < tag {
		i++
	}
	if i > 0 {
		n := copy(w.carried, w.carried[i:])
		clear(w.carried[n:])
		w.carried = w.carried[:n]
	}
	if len(w.carried) == 0 {
		return time.Time{}
	}
	return w.carried[0].at
}

// writeNow writes what is held, at once. The library amqp091 never calls a Flush method of its
// net.Conn: it flushes its own bufio.Writer. So the name says what the session means by it instead.
func (w *coalescer) writeNow() error { return w.flushSoon(false) }

// flushSoon writes what is held, now. But if soon and the next call is expected in time
// (expectMore), it waits. It leaves the write to that call or to the timer. The caller calls it
// each time it has published what there was (Session.Flush). So the time between calls, averaged,
// tells when the next message is likely. Take a steady flow of messages that one at a time would
// each be a write of its own. This groups those that come close together. A message that would wait
// for nothing goes out at once.
func (w *coalescer) flushSoon(soon bool) error {
	w.mu.Lock()
	if soon && w.expectMore() && w.err == nil {
		w.mu.Unlock()
		return nil // the timer is armed since the first byte was held
	}
	if err := w.err; err != nil {
		w.mu.Unlock()
		return err
	}
	_, err := w.flush()
	w.mu.Unlock()
	if err != nil && w.failed != nil {
		return w.failed(err)
	}
	return err
}

// expectMore records a call of flushSoon. It reports whether what is held should wait for the next
// call, expected at the average time between calls. A group waits while the next call would join it
// within the group span of its first byte. That span is 7/10 of the delay. A message held alone
// waits only for a partner due within half the delay. It waits only every other time (after a write
// that went alone). Those limits lift when a group of three is expected within the span. So at a
// pace where pairs are all that could form, at most a third of the messages wait. They make as many
// writes as two messages in three. At a steady pace where threes form, a write carries three calls
// or more. At a slower pace a message never waits for a partner that far off. w.mu is held.
func (w *coalescer) expectMore() bool {
	now := time.Now()
	if !w.idle.IsZero() {
		w.gap += (min(now.Sub(w.idle), w.delay) - w.gap) / 8
	}
	w.idle = now
	if len(w.buf) == 0 {
		return false
	}
	w.calls++
	due, span := now.Add(w.gap).Sub(w.first), w.delay*7/10
	if w.calls > 1 {
		return due <= span
	}
	return due <= w.delay/2 && (w.lone || 2*w.gap <= span)
}

// flush writes the held bytes; w.mu is held.
func (w *coalescer) flush() (int, error) {
	if w.armed {
		w.armed = false
		w.timer.Stop()
	}
	if len(w.buf) == 0 {
		return 0, nil
	}
	w.lone = w.calls <= 1
	n, err := w.write(w.buf)
	if err == nil {
		w.stamp(w.last, time.Now()) // not w.tag: a publish in progress has frames still to come
	}
	if cap(w.buf) > 4*coalesceBytes {
		w.buf = nil // one large message; do not keep its buffer
	} else {
		w.buf = w.buf[:0]
	}
	return n, err
}

// write writes p to the socket; a failure is sticky. w.mu is held.
func (w *coalescer) write(p []byte) (int, error) {
	w.writes++
	w.writing.Store(true)
	n, err := w.Conn.Write(p)
	w.writing.Store(false)
	if err != nil {
		w.err = err
	}
	return n, err
}

// Close closes the socket without waiting for a write in progress (which it ends).
func (w *coalescer) Close() error {
	w.timer.Stop()
	return w.Conn.Close()
}
