// Package publisher publishes outbox messages to RabbitMQ with publisher confirms. It is the
// relay's AMQP side; package consumer speaks AMQP too, on the receiving end.
//
// A Session is one connection with one channel in confirm mode. It never retries and never
// reconnects: the relay replays from the database after any failure, so a failed session is
// simply closed and a new one dialed.
//
// # Publishing
//
// Publish sends one message to the configured exchange (a durable topic exchange, declared by
// Dial), or to the exchange the message names, with its routing key (its event type unless the
// table's mapping gives another), persistent, and mandatory, so that an unroutable message comes
// back instead of vanishing. Publishing documents the exact AMQP properties and headers: the
// message's aggregate type and id (HeaderAggregateType), and on a parked message why and from
// where (HeaderParkReason). Dial fills in a zero Config field with its default (DefaultWindow,
// say).
//
// Dial declares the park and alternate queues on channels of their own, and opens the session
// even when it cannot (a classic queue whose node is down): only Park needs the park queue, and
// waits for it. Config.QueueType auto makes them quorum queues when Endpoints has several URLs.
//
// An exchange a message names is not declared: the session checks once that it exists, with a
// passive declare on a short-lived channel of its own, before it publishes there. A missing one
// makes Publish fail with ErrInvalidMessage (so wire.ErrUnpublishable) and the session lives
// on, where publishing would have closed its channel. The verdict is kept for the session; a
// missing exchange is asked about again after a few seconds, so one created meanwhile is used.
// Such an exchange has no alternate exchange unless its owner gave it one: an unroutable message
// there comes back as ErrReturned. Publish returns the message's sequence number, its delivery
// tag: 1, 2, 3… within the session. Call it from a single goroutine, so that sequence order is the caller's order.
//
// The session does not count the messages in flight: the caller bounds them (the relay's one
// ledger, package checkpoint, holds at most Config.Window). The session remembers of each only
// what the channel needs: its delivery tag, its message id to match a basic.return, the number
// its Confirm carries, and amqp091's DeferredConfirmation of it. amqp091's stream of
// confirmations can report a nacked message as acked: when the nack came before the acks of
// earlier tags, a multiple ack that passes over it counts it too. The deferred confirmation keeps
// the nack, so the session judges a message nacked if either says so (judge).
//
// While the broker blocks the connection (a memory or disk alarm), Publish waits before writing;
// ctx ends the wait, and the session stays usable. A write that blocks anyway ignores ctx inside
// amqp091; each write to the socket is bounded by Config.WriteTimeout instead: a write that makes
// no progress for that long fails and ends the session. Brief stalls of the broker's
// flow control, and large messages that keep moving, pass unharmed.
//
// Publish returning means the message is handed over, not yet written: the session holds the
// frames of a burst of publishes and writes them together, when the caller calls Flush (it has
// nothing more to publish for now) and no more is expected soon (see Session.Flush), when 64 KiB
// are held, or 2.5 ms after the first was held. The broker then takes a burst, or messages that
// come close together, in one read per write instead of one per message; a message that nothing
// follows closely goes out at once.
// Heartbeats and every other method are written at once, behind what is held. A held write that
// fails ends the session like any failed write: its messages never get a positive Confirm.
//
// # Confirms
//
// Confirms delivers exactly one wire.Confirm per published message, in sequence order, with a
// nil Err only if the broker acknowledged the message and did not return it:
//
//   - a nack gives an error wrapping ErrNacked;
//   - a basic.return gives a *ReturnError, which wraps ErrReturned;
//   - when the session ends (the broker or network closes the channel or connection, a cut, a
//     protocol violation, Close), a last Confirm with Seq 0 and an error wrapping ErrClosed
//     follows, and the channel is closed. Messages published but without a Confirm by then have
//     an unknown fate and must be replayed.
//
// The broker sends an unroutable message's basic.return before its basic.ack, and amqp091
// hands each return to its listener, from the same reader goroutine, before it processes the
// next frame. The session's goroutine therefore drains returns before it judges each ack and
// attributes a return to the in-flight message with the same message id. A return that matches
// no message in flight would mean this ordering broke; the session then ends rather than stand
// by a success it may already have reported.
//
// Verdicts are never blocked on the reader: amqp091 drops a notification its listener does not
// take within 5 s, so the session always drains amqp091 and queues verdicts the reader of
// Confirms has not yet taken.
//
// # Closing
//
// Close closes the connection, waiting at most Config.CloseTimeout for the broker (a blocked
// broker may never answer), then closes the socket, and returns once the session's goroutine
// has stopped. It does not wait for outstanding confirms: read them first.
//
// Errors never contain the URL's password, and the package never logs.
package publisher
