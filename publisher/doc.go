// Package publisher publishes outbox messages to RabbitMQ with publisher confirms. It is the
// relay's AMQP side; package consumer speaks AMQP too, on the receiving end. See
// docs/architecture.md for the relay that drives it.
//
// A Session is one connection with one channel in confirm mode. It never retries and never
// reconnects: the relay replays from the database after any failure. So a failed session is simply
// closed and a new one dialed.
//
// # Publishing
//
// Publish sends one message, persistent and mandatory, so that an unroutable message comes back
// instead of vanishing. It sends it to the configured exchange, a durable topic exchange that Dial
// declares. Or it sends it to the exchange the message names. The routing key is the message's
// event type, unless the table's mapping gives another. Publishing documents the exact AMQP
// properties and headers. Among them are the message's aggregate type and id (HeaderAggregateType).
// On a parked message they say why and from where (HeaderParkReason). Dial fills in a zero Config
// field with its default (DefaultWindow, say).
//
// Dial declares the park and alternate queues on channels of their own. It opens the session even
// when it cannot declare them (a classic queue whose node is down). Only Park needs the park queue,
// and waits for it. Config.QueueType auto makes them quorum queues when Endpoints has several URLs.
//
// An exchange a message names is not declared. Before the session publishes there, it checks once
// that the exchange exists. It does so with a passive declare on a short-lived channel of its own.
// A missing one makes Publish fail with ErrInvalidMessage (so wire.ErrUnpublishable). The session
// lives on, where publishing would have closed its channel. The verdict is kept for the session. A
// missing exchange is asked about again after a few seconds, so one created meanwhile is used. Such
// an exchange has no alternate exchange unless its owner gave it one. An unroutable message there
// comes back as ErrReturned. Publish returns the message's sequence number, its delivery tag: 1, 2,
// 3… within the session. Call it from a single goroutine, so that sequence order is the caller's
// order.
//
// The session does not count the messages in flight: the caller bounds them.
// The relay's one ledger, package checkpoint, holds at most Config.Window.
// The session remembers of each message only what the channel needs:
//   - its delivery tag;
//   - its message id, to match a basic.return;
//   - the number its Confirm carries;
//   - amqp091's DeferredConfirmation of it.
//
// The stream of confirmations of amqp091 can report a nacked message as acked. That happens when
// the nack came before the acks of earlier tags. A multiple ack that passes over it then counts it
// too. The deferred confirmation keeps the nack. So the session judges a message nacked if either
// says so (judge).
//
// While the broker blocks the connection (a memory or disk alarm), Publish waits before writing.
// The context ctx ends the wait, and the session stays usable. A write that blocks anyway ignores
// ctx inside amqp091. Config.WriteTimeout bounds each write to the socket instead. A write that
// makes no progress for that long fails and ends the session. Brief stalls of the broker's flow
// control, and large messages that keep moving, pass unharmed.
//
// Publish returning means the message is handed over, not yet written.
// The session holds the frames of a burst of publishes and writes them together.
// It writes them at the first of these:
//   - the caller calls Flush (it has nothing more to publish for now), and no more is expected
//     soon (see Session.Flush);
//   - 64 KiB are held;
//   - 2.5 ms passed since the first was held.
//
// The broker then takes a burst, or messages that come close together, in one read per write.
// Without that it would take one read per message. A message that nothing follows closely goes out
// at once. Heartbeats and every other method are written at once, behind what is held. A held write
// that fails ends the session like any failed write. Its messages never get a positive Confirm.
//
// # Confirms
//
// Confirms delivers exactly one wire.Confirm per published message, in sequence order. Its Err is
// nil only if the broker acknowledged the message and did not return it:
//
//   - A nack gives an error wrapping ErrNacked.
//   - A basic.return gives a *ReturnError, which wraps ErrReturned.
//   - When the session ends, a last Confirm with Seq 0 and an error wrapping ErrClosed follows.
//     The channel is then closed. The session ends when the broker or network closes the channel
//     or connection. A cut, a protocol violation or Close ends it too.
//     Messages published but without a Confirm by then have an unknown fate.
//     They must be replayed.
//
// The broker sends an unroutable message's basic.return before its basic.ack. And amqp091 hands
// each return to its listener before it processes the next frame. It does so from the same reader
// goroutine. The session's goroutine therefore drains returns before it judges each ack. It
// attributes a return to the in-flight message with the same message id. A return that matches no
// message in flight would mean this ordering broke. The session then ends rather than stand by a
// success it may already have reported.
//
// Verdicts are never blocked on the reader. amqp091 drops a notification its listener does not take
// within 5 s. So the session always drains amqp091. It queues the verdicts the reader of Confirms
// has not yet taken.
//
// # Closing
//
// Close closes the connection, waiting at most Config.CloseTimeout for the broker. A blocked broker
// may never answer. Then it closes the socket. It returns once the session's goroutine has stopped.
// It does not wait for outstanding confirms: read them first.
//
// Errors never contain the URL's password, and the package never logs.
package publisher
