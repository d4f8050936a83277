package relayd

import (
	"log/slog"
	"sync"
	"time"
)

// blockWatch follows the broker blocking the relay's publishing connections (a memory or disk
// alarm, connection.blocked). Nothing is published while it lasts, so it is logged when it
// starts and ends, and walbox_broker_blocked, /readyz and /status show it meanwhile. Each session
// reports its blocks and unblocks in turn, so a count of blocked connections is enough.
type blockWatch struct {
	log *slog.Logger

	mu     sync.Mutex
	n      int       // publishing connections blocked now
	since  time.Time // when the first of them was blocked
	reason string    // the broker's reason for the first block
}

// observe takes one session's block or unblock; it is the sessions' OnBlocked.
func (b *blockWatch) observe(host string, blocked bool, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case blocked:
		b.n++
		if b.n == 1 {
			b.since, b.reason = time.Now(), reason
			b.log.Warn("broker blocks publishing; nothing is published until it unblocks",
				"broker", host, "reason", reason)
		}
	case b.n > 0:
		b.n--
		if b.n == 0 {
			took := time.Since(b.since).Round(time.Millisecond)
			b.log.Warn("broker unblocked publishing", "broker", host, "blocked_for", took.String(), "how", unblockedHow(reason))
		}
	}
}

func unblockedHow(reason string) string {
	if reason == "" {
		return "connection.unblocked"
	}
	return reason
}

// blocked reports whether the broker blocks a publishing connection now, and why.
func (b *blockWatch) blocked() (bool, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n > 0, b.reason
}

func (b *blockWatch) active() bool {
	on, _ := b.blocked()
	return on
}
