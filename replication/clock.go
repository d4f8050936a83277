package replication

import (
	"sync/atomic"
	"time"
)

// heardClock records when a connection last read bytes from the server, on the monotonic clock.
// A step of the wall clock (NTP, a suspended VM) neither fakes nor hides a silence.
type heardClock struct {
	base time.Time    // carries a monotonic reading
	last atomic.Int64 // when bytes were last read, as nanoseconds after base
}

func newHeardClock() *heardClock { return &heardClock{base: time.Now()} }

// note records that bytes were read now.
func (c *heardClock) note() { c.last.Store(int64(time.Since(c.base))) }

// silent returns how long nothing was read.
func (c *heardClock) silent() time.Duration {
	return time.Since(c.base) - time.Duration(c.last.Load())
}
