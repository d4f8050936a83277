package relayd

import (
	"log/slog"
	"sync"
	"time"

	"github.com/walbox/walbox/publisher"
)

// blockWatch follows the broker blocking the relay's publishing connections. A memory or disk alarm
// blocks them (connection.blocked). Nothing is published while it lasts, so it is logged when it
// starts and ends. Meanwhile walbox_broker_blocked, /readyz and /status show it. Each session
// reports its blocks and unblocks in turn, so a count of blocked connections is enough.
//
// A session that ends while blocked (its write timed out, say) proves nothing about the alarm. The
// block is kept until one of three things happens:
//   - a later session is blocked too: the same block goes on;
//   - the broker confirms a message published after it: the block is over;
//   - the relay becomes a standby: it publishes nothing.
//
// So one alarm is one block, however many sessions it outlasts. The gauge does not drop to 0
// between them.
type blockWatch struct {
	log       *slog.Logger
	confirmed func() uint64 // messages confirmed so far, by any session
	standby   func() bool   // the relay waits as a standby

	mu       sync.Mutex
	n        int       // publishing connections blocked now
	since    time.Time // when the first of them was blocked
	reason   string    // the broker's reason for the first block
	kept     bool      // the last blocked session ended blocked; no unblock seen since
	keptAt   uint64    // confirmed() when it ended
	keptHost string    // its broker
}

// observe takes one session's block or unblock; it is the sessions' OnBlocked.
func (b *blockWatch) observe(host string, blocked bool, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case blocked:
		b.n++
		if b.n == 1 && b.kept {
			b.kept = false // the block goes on in this session
		} else if b.n == 1 {
			b.since, b.reason = time.Now(), reason
			b.log.Warn("broker blocks publishing; nothing is published until it unblocks",
				"broker", host, "reason", reason)
		}
	case b.n > 0:
		b.n--
		if b.n > 0 {
			return
		}
		if reason == publisher.SessionEnded {
			b.kept, b.keptAt, b.keptHost = true, b.confirmed(), host
			return
		}
		b.unblocked(host, reason)
	}
}

// unblocked logs the end of the block. Called with mu held.
func (b *blockWatch) unblocked(host, reason string) {
	b.kept = false
	took := time.Since(b.since).Round(time.Millisecond)
	b.log.Warn("broker unblocked publishing", "broker", host, "blocked_for", took.String(), "how", unblockedHow(reason))
}

func unblockedHow(reason string) string {
	if reason == "" {
		return "connection.unblocked"
	}
	return reason
}

// blocked reports whether the broker blocks a publishing connection now, and why. A kept block
// ends here once a message is confirmed after it.
func (b *blockWatch) blocked() (bool, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.kept || b.n > 0:
	case b.confirmed() > b.keptAt:
		b.unblocked(b.keptHost, "a later session's messages were confirmed")
	case b.standby():
		b.unblocked(b.keptHost, "the relay is a standby now")
	}
	return b.n > 0 || b.kept, b.reason
}

func (b *blockWatch) active() bool {
	on, _ := b.blocked()
	return on
}
