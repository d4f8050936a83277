package replication

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/wire"
)

// A message the broker refuses ends the session, and the next one starts again from the slot.
// The broker refuses by a nack, or returns the message as unroutable.
// A per-row exchange with no queue bound and no alternate exchange is one example.
// If the refusal repeats, every retry would send the whole window published behind that message again.
// Consumers would get it once more each time.
// So after a refusal the relay stalls: it publishes one message at a time, waiting for each confirm.
// It stalls until the broker confirms the refused message.
// A retry then sends only what lies between the slot and that message.
// The relay reports the state "stalled" (not ready).
// Once the message passes, the window opens again.

// msgKey identifies a message across sessions: the same row sent again has the same key.
// The row's WAL position is part of it, so that a later row reusing an id is another message.
type msgKey struct {
	id  uuid.UUID
	mid string // wire.Message.MessageID, for ids that are not UUIDs
	lsn pglogrepl.LSN
}

func keyOf(m *wire.Message, lsn pglogrepl.LSN) msgKey {
	return msgKey{id: m.ID, mid: m.MessageID, lsn: lsn}
}

func (k msgKey) String() string {
	if k.mid != "" {
		return k.mid
	}
	return k.id.String()
}

// A message the broker refuses for its size closes the channel (see wire.TooLargeError).
// The broker does not say which message it was.
// The message is known if only one message was unconfirmed, or none while a publish was being written.
// The relay then pins it.
// Every later session parks it with the broker's reason instead of publishing it.
// A pin is kept after its parked copy is confirmed.
// A replay starts at the transaction's beginning, and a transaction may have several such rows.
// Otherwise the relay stalls until the newest message then in flight is confirmed.
// One at a time, the refusal recurs with only the refused message unconfirmed, and the relay pins it.
// Nothing of this outlives the process.
// A new process meets the same refusal again from the slot, and comes to the same row.

// stall is the relay's memory of a refused message, kept across sessions.
type stall struct {
	active bool
	key    msgKey
	err    error // the refusal

	pins  map[msgKey]error // messages refused for their size, to park, with the reason
	order []msgKey         // the pins, oldest first, to forget the oldest beyond maxPins
}

// maxPins bounds the messages pinned: the oldest is forgotten first, long passed by the slot.
const maxPins = 4096

// pin records that m is parked with the reason why whenever it comes again.
func (st *stall) pin(k msgKey, why error) {
	if st.pins == nil {
		st.pins = make(map[msgKey]error)
	}
	if _, ok := st.pins[k]; !ok {
		st.order = append(st.order, k)
	}
	st.pins[k] = why
	if len(st.order) > maxPins {
		delete(st.pins, st.order[0])
		st.order = st.order[1:]
	}
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
	st := s.stall
	if st.active && st.key == k {
		s.log.Info("the refused message was confirmed; the stall is over", "msg_id", k.String())
		st.active, st.key, st.err = false, msgKey{}, nil
		s.led.SetLimit(s.cfg.Window)
		s.stats.State.Store(int32(StateStreaming))
	}
}

// pinned returns the reason m is parked with, if it is the message the broker refused for its size.
func (s *stream) pinned(m *wire.Message, lsn pglogrepl.LSN) (error, bool) {
	why, ok := s.stall.pins[keyOf(m, lsn)]
	return why, ok
}

// tooLarge is the end of a session by a message the broker refused for its size.
// The key is that message when it is known (pin).
// Otherwise it is the newest message in flight, which the relay stalls on.
type tooLarge struct {
	pin bool
	key msgKey
	err *wire.TooLargeError
}

func (t *tooLarge) Error() string {
	if t.pin {
		return fmt.Sprintf("message %s: %v; it will be parked", t.key, t.err)
	}
	return fmt.Sprintf("%v; publishing one message at a time, up to %s, to find which", t.err, t.key)
}

func (t *tooLarge) Unwrap() error { return t.err }

// refusedTooLarge turns err, a failure of the publishing session, into a *tooLarge.
// It does so if the broker refused a message for its size.
// The message whose publish failed is publishing, at lsn.
// It is nil when the session's end came as a confirm.
// The refused message is one not confirmed yet: one of the messages in flight, or the one being published.
func (s *stream) refusedTooLarge(err error, publishing *wire.Message, lsn pglogrepl.LSN) error {
	var tl *wire.TooLargeError
	if !errors.As(err, &tl) {
		return err
	}
	span := s.led.Span()
	_, newest, _ := s.led.Newest()
	switch {
	case publishing != nil && span == 0:
		return &tooLarge{pin: true, key: keyOf(publishing, lsn), err: tl}
	case publishing != nil:
		return &tooLarge{key: keyOf(publishing, lsn), err: tl}
	case span == 1:
		return &tooLarge{pin: true, key: newest.key, err: tl}
	case span > 1:
		return &tooLarge{key: newest.key, err: tl}
	}
	return err
}

// noteStall records a refusal that ended a session, and logs it once per message.
// It reports whether the relay learned which message to park, or began to look for it.
// The next session then moves on, so it starts without backing off.
// A transaction with many such rows is replayed once per row.
// Backing off each time would take minutes.
func (r *Relay) noteStall(err error) (learned bool) {
	var tl *tooLarge
	if errors.As(err, &tl) {
		return r.noteTooLarge(tl)
	}
	rf, ok := asRefused(err)
	if !ok {
		return false
	}
	if !r.stall.active || r.stall.key != rf.key {
		r.cfg.Logger.Error("the broker refused a message; publishing it alone, from the slot, until it is confirmed. "+
			"If it was returned as unroutable, bind a queue for it or give its exchange an alternate exchange",
			"slot", r.cfg.Slot, "msg_id", rf.key.String(), "error", rf.err)
	}
	r.stall.active, r.stall.key, r.stall.err = true, rf.key, rf.err
	return false
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

// noteTooLarge records a refusal for size: the message to park, or the stall that finds it. It
// reports whether either is new.
func (r *Relay) noteTooLarge(tl *tooLarge) bool {
	if tl.pin {
		_, known := r.stall.pins[tl.key]
		r.cfg.Logger.Error("the broker refused a message for its size; parking it", "slot", r.cfg.Slot,
			"msg_id", tl.key.String(), "reason", tl.err.Reason)
		r.stall.pin(tl.key, fmt.Errorf("%w: refused by the broker: %s", wire.ErrUnpublishable, tl.err.Reason))
		return !known
	}
	if r.stall.active {
		return false
	}
	r.cfg.Logger.Error("the broker refused a message for its size; publishing one at a time to find it", "slot", r.cfg.Slot,
		"up_to", tl.key.String(), "reason", tl.err.Reason)
	r.stall.active, r.stall.key, r.stall.err = true, tl.key, tl.err
	return true
}
