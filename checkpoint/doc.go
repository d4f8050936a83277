// Package checkpoint turns broker confirms, which may arrive in any order, into the position the
// relay may report to PostgreSQL as flushed.
//
// The relay tells a Tracker, in stream order, about every message it hands to the broker
// (Dispatch) and about every transaction boundary (Begin, Commit). The broker's verdicts come back
// through Ack and Nack. Watermark returns the end LSN of the last transaction whose every message,
// and every message of every transaction before it, has been acked. It never moves backwards and it
// never passes a message that was not acked: after a Nack it stops for good, because the relay must
// then replay from the slot.
//
// The package does no I/O and holds no locks; one goroutine owns a Tracker.
package checkpoint
