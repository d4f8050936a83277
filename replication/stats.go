package replication

import (
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
)

// Stats are the relay's counters and positions, safe to read from any goroutine.
type Stats struct {
	Published    atomic.Uint64 // messages handed to the broker
	Confirmed    atomic.Uint64 // messages the broker confirmed (parked ones included)
	Parked       atomic.Uint64 // messages set aside as undeliverable
	Scheduled    atomic.Uint64 // messages handed to the schedule, due after their commit
	Sessions     atomic.Uint64 // sessions that reached streaming
	ConfirmedLSN atomic.Uint64 // last flush position reported to the server
	ReceivedLSN  atomic.Uint64 // end of the last transaction received
	ServerLSN    atomic.Uint64 // server's WAL end from the last keepalive
	LastCommit   atomic.Int64  // commit time of the last transaction begun, unix nanoseconds
	Streaming    atomic.Bool   // a session is streaming now
	Blocked      atomic.Bool   // a publish is blocked by the broker
	InFlight     atomic.Int64  // messages published and not yet confirmed
	OldestSent   atomic.Int64  // when the oldest unconfirmed message was published, unix nanoseconds; 0 if none
	LastConfirm  atomic.Int64  // when the broker last confirmed a message, unix nanoseconds
	State        atomic.Int32  // a State
	lastErr      atomic.Value  // string
}

func (s *Stats) published()                   { s.Published.Add(1) }
func (s *Stats) confirmed()                   { s.Confirmed.Add(1) }
func (s *Stats) confirmedLSN(l pglogrepl.LSN) { s.ConfirmedLSN.Store(uint64(l)) }
func (s *Stats) received(l pglogrepl.LSN)     { s.ReceivedLSN.Store(uint64(l)) }
func (s *Stats) serverWALEnd(l pglogrepl.LSN) { s.ServerLSN.Store(uint64(l)) }
func (s *Stats) begin(commitTime time.Time)   { s.LastCommit.Store(commitTime.UnixNano()) }

// State is what the relay is doing.
type State int32

// The relay's states.
const (
	StateStarting  State = iota // connecting and checking
	StateStreaming              // streaming from the slot (active)
	StateStandby                // another process holds the slot
	StateRetrying               // waiting to start a new session after an error
	StateStopped                // Run returned after a shutdown
	StateFailed                 // Run returned an error that retrying cannot fix
	StateStalled                // the broker refused a message; sent alone until it passes (see stall.go)
)

func (s State) String() string {
	switch s {
	case StateStreaming:
		return "streaming"
	case StateStandby:
		return "standby"
	case StateRetrying:
		return "retrying"
	case StateStopped:
		return "stopped"
	case StateFailed:
		return "failed"
	case StateStalled:
		return "stalled"
	}
	return "starting"
}

// LastError returns the error that ended the last session, if any.
func (s *Stats) LastError() string {
	v, _ := s.lastErr.Load().(string)
	return v
}

// clearLastError forgets the last session's error once a session streams again.
func (s *Stats) clearLastError() { s.lastErr.Store("") }

func (s *Stats) setLastError(err error) {
	if err != nil {
		s.lastErr.Store(err.Error())
	}
}
