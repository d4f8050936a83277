// Package checkpoint keeps the one ledger of the messages the relay has in flight: it bounds them,
// and it turns broker confirms, which may arrive in any order, into the position the relay may
// report to PostgreSQL as flushed.
//
// The relay tells a Ledger, in stream order, about every message it hands to the broker
// (Dispatch, with a value of its own that it gets back with the verdict) and about every
// transaction boundary (Begin, Commit). Dispatch refuses a message, with ErrFull, while the
// window holds as many messages as SetLimit allows, counted from the oldest unconfirmed one: the
// relay reads no more until a confirm makes room (Full). The broker's verdicts come back through Ack and Nack.
// Watermark returns the end LSN of the last transaction whose every message, and every message
// of every transaction before it, has been acked. It never moves backwards and it never passes a
// message that was not acked: after a Nack it stops for good, because the relay must then replay
// from the slot.
//
// The package does no I/O and holds no locks; one goroutine owns a Ledger.
package checkpoint
