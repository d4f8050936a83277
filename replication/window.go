package replication

import (
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/checkpoint"
)

// The session's checkpoint.Ledger is the one bound on the messages in flight, and their record.
// Those are the messages published or parked, not yet confirmed.
// The stream reads no more WAL while the ledger is full (the phase windowFull).
// So no publish ever waits for room, and the publisher keeps no window of its own.
// Its limit is Config.Window, or one while a refused message stalls the stream (see stall.go).

// flight is what the ledger keeps of a message in flight, by sequence number.
// It serves for the latencies of its confirm, and for naming it if the broker refuses it.
type flight struct {
	at, commit time.Time
	read       time.Time // when the reader read the message's frame
	eventType  string
	key        msgKey
}

// newLedger returns a session's ledger, starting at start, the slot's position.
// The relay's stall st is kept across sessions.
func newLedger(start pglogrepl.LSN, size int, st *stall) *checkpoint.Ledger[flight] {
	l := checkpoint.NewLedger[flight](start, size)
	if st.active {
		l.SetLimit(1)
	}
	return l
}
