// Package streampub publishes outbox messages into a RabbitMQ stream through the stream protocol.
// It publishes each exactly once: the broker drops what a replay sends again.
// It implements the relay's publisher interface (replication.Publisher, with
// replication.Positioner) without importing package replication.
// See docs/architecture.md for the relay, and docs/streams.md for streams.
//
// # Exactly once
//
// The producer has a name, and each message a publishing id.
// ProducerName derives the name from the database system, the database and the slot.
// The broker stores a message only if its id is above the last one it stored for that name.
// Each message also carries these application properties:
//   - the producer's name (PropProducer);
//   - its publishing id;
//   - its position (Position): the timeline and LSN of its transaction's commit record, and its
//     index among the transaction's rows;
//   - its event type, aggregate type and aggregate id (PropEventType);
//   - for a parked message, its reason, table and LSN (PropParkReason).
//
// Positions grow in commit order, on every timeline.
//
// At the start of a session Bind asks the broker for the producer's last stored id.
// It reads the stream back from its end to the last message of that producer.
// That message's id and position are the anchor.
// A message at or before the anchor is stored already: Publish confirms it at once and sends
// nothing. It must be the stream's message at its position, with its id and body.
// Else Publish fails with an error that is wire.ErrConflict, and the relay stops.
// The first message after the anchor gets the last id plus one, the next one more, and so
// on. So every session numbers the same messages the same way.
// A message's id is the anchor's id plus its rank after the anchor, whichever session computes it.
// A replay may reach the broker anyway: an old session's, still in flight.
// It carries the ids the broker stored already, and is dropped.
// The file docs/streams.md has the whole argument and where it ends.
//
// # Confirms
//
// Confirms yields one verdict per message Publish or Park accepted.
// The verdict is nil once the broker stored the message, or dropped it as a duplicate.
// A message the broker did not confirm ends the session.
// The channel yields an error with sequence number 0 and closes.
// The relay then starts again from the slot.
// A message too large for a frame is unpublishable: Publish says so and the relay parks it.
// It parks it into the stream ParkStream names, at least once.
// The command walbox parked replays a parked entry under a producer of its own (ReplayProducer).
package streampub
