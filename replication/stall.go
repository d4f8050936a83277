package replication

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/walbox/walbox/wire"
)

// A message the broker refuses (nacks, or returns as unroutable: a per-row exchange with no
// queue bound and no alternate exchange, say) ends the session, and the next one starts again
// from the slot. If the refusal repeats, every retry would send again the whole window
// published behind that message, delivering it to consumers once more each time. So after a
// refusal the relay stalls: it publishes one message at a time, waiting for each confirm, until
// the broker confirms the refused message. A retry then sends only what lies between the slot
// and that message, the relay reports the state "stalled" (not ready), and once the message
// passes, the window opens again.

// msgKey identifies a message across sessions: the same row sent again has the same key.
type msgKey struct {
	id  uuid.UUID
	mid string // wire.Message.MessageID, for ids that are not UUIDs
}

func keyOf(m *wire.Message) msgKey { return msgKey{id: m.ID, mid: m.MessageID} }

func (k msgKey) String() string {
	if k.mid != "" {
		return k.mid
	}
	return k.id.String()
}

// stall is the relay's memory of a refused message, kept across sessions.
type stall struct {
	active bool
	key    msgKey
	err    error // the refusal
}

// refused is the error of a message the broker nacked or returned.
type refused struct {
	seq uint64
	key msgKey
	err error
}

func (r *refused) Error() string {
	return fmt.Sprintf("broker did not confirm message %s (sequence %d): %v", r.key, r.seq, r.err)
}

func (r *refused) Unwrap() error { return r.err }

// passed ends the stall once the broker confirmed the refused message.
func (s *stream) passed(k msgKey) {
	if s.win.stall.active && s.win.stall.key == k {
		s.log.Info("the refused message was confirmed; the stall is over", "msg_id", k.String())
		*s.win.stall = stall{}
		s.stats.State.Store(int32(StateStreaming))
	}
}

// noteStall records a refusal that ended a session, and logs it once per message.
func (r *Relay) noteStall(err error) {
	rf, ok := asRefused(err)
	if !ok {
		return
	}
	if !r.stall.active || r.stall.key != rf.key {
		r.cfg.Logger.Error("the broker refused a message; publishing it alone, from the slot, until it is confirmed. "+
			"If it was returned as unroutable, bind a queue for it or give its exchange an alternate exchange",
			"slot", r.cfg.Slot, "msg_id", rf.key.String(), "error", rf.err)
	}
	r.stall = stall{active: true, key: rf.key, err: rf.err}
}

// unlessStalled returns st, or StateStalled while a refused message waits.
func (r *Relay) unlessStalled(st State) State {
	if r.stall.active {
		return StateStalled
	}
	return st
}

func asRefused(err error) (*refused, bool) {
	var rf *refused
	ok := errors.As(err, &rf)
	return rf, ok
}
