// Package replication relays outbox rows from a PostgreSQL logical replication slot to a broker.
//
// A Relay owns one replication connection at a time, in one goroutine. Each session connects,
// inspects the server through package inspect (wal_level, the publication's coverage of every
// outbox table, the tables' columns, the slot: the same reading and judgement as walbox doctor),
// holds the slot against its record in package registry, starts pgoutput at the slot's
// confirmed_flush_lsn and streams: every outbox insert is handed to the Publisher as it arrives,
// and the broker's confirms feed a checkpoint.Tracker.
//
// # States
//
// Run is a loop over sessions; Stats.State says where it is:
//
//	starting ──► streaming ──► (session ends) ──► retrying ──► starting ...
//	    │            │                                ▲
//	    │            └──► stalled (a refused message is retried one at a time) ──┘
//	    ├──► standby (another process streams from the slot; ask again every StandbyRetry)
//	    └──► failed (an error retrying cannot fix: Run returns it)
//	any state ──► stopped (Run's context ended; the last session shut down gracefully)
//
// Session setup (connect, inspect, slot, broker, START_REPLICATION) is bounded like streaming
// (silence.go). Streaming ends on any publish error, nack, return, lost connection or failed
// coverage check; the next session starts again from the slot.
//
// # Where the slot can move
//
// Only stream.sendStatus sends a position to the server (stream.go), and stream.finalStatus and
// the keeper (keeper.go) call it. The position it sends is
//
//	min(Tracker.Watermark(), watch.limit)
//
// after watch.record has written it to walbox_slots. Tracker.Watermark moves in three places,
// all in stream.go: Tracker.Ack (a broker confirm of every message up to a transaction's end),
// Tracker.Commit (a transaction's end LSN once all its messages are confirmed; an empty
// transaction at once) and Tracker.AdvanceIdle (a keepalive's WAL end, taken only when nothing is in
// flight and no transaction is open). watch.limit moves only in watch.check: to the WAL insert
// position read by the check before the last successful one, so the slot never passes a point
// where the publication's coverage was not verified. Nothing else moves it: not a row's LSN, not
// a commit's start LSN, not anything merely received. Write, flush and apply positions are always
// set together and explicitly.
//
// # Failure
//
// Failure is handled by starting over: the next session starts again from the slot, so
// unconfirmed messages are sent again, in order. Delivery is therefore at least once. Errors
// that retrying cannot fix (wal_level, a publication that no longer covers a table, a slot that
// is missing though recorded or ahead of its record, a column the mapping needs gone) end Run.
package replication
