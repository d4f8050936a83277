package publisher

import "time"

// SetRecheckMissing changes how long a missing exchange stays missing, until restore.
func SetRecheckMissing(d time.Duration) (restore func()) {
	old := recheckMissing
	recheckMissing = d
	return func() { recheckMissing = old }
}

// SetCoalesceDelay changes how long sessions dialled from now hold published messages before
// writing them by themselves, until restore.
func SetCoalesceDelay(d time.Duration) (restore func()) {
	old := coalesceDelay
	coalesceDelay = d
	return func() { coalesceDelay = old }
}

// SocketWrites returns how many writes the session made to its socket.
func SocketWrites(s *Session) int {
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	return s.out.writes
}

// LaneOf lets the tests pick aggregate ids by lane.
var LaneOf = laneOf

// SinkQueueType is sinkQueueType, for the external tests.
var SinkQueueType = sinkQueueType
