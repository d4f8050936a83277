// Package checkpoint keeps the one ledger of the messages the relay has in flight.
// It bounds them, and turns broker confirms into the position the relay may report as flushed.
// Confirms may arrive in any order.
// It also says when the relay reports that position (Schedule).
//
// The relay tells a Ledger, in stream order, about every message it hands to the broker (Dispatch).
// Each message carries a value of the relay's, which it gets back with the verdict.
// The relay also tells it about every transaction boundary (Begin, Commit).
// The window bounds the messages from the oldest unconfirmed one, at most SetLimit of them.
// While the window is full, Dispatch refuses a message with ErrFull.
// The relay then reads no more until a confirm makes room (Full).
// The broker's verdicts come back through Ack and Nack.
//
// Watermark returns the end LSN of the last transaction that is wholly acked.
// Every message of every transaction before it is acked too.
// The watermark never moves backwards, and never passes a message that was not acked.
// After a Nack it stops for good: the relay must then replay from the slot.
//
// A Schedule is fed the watermark, looks and reports, and asked whether a report is due.
//
// The package does no I/O and takes no locks.
// One goroutine owns a Ledger; a Schedule's caller makes its calls one at a time.
package checkpoint
