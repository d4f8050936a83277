// Package streampub publishes outbox messages into a RabbitMQ stream through the stream protocol,
// exactly once: the broker drops what a replay sends again. It implements the relay's publisher
// interface (replication.Publisher, with replication.Positioner) without importing package
// replication.
//
// # Exactly once
//
// The producer has a name (ProducerName, derived from the database system, the database and the
// slot), and each message a publishing id. The broker stores a message only if its id is above the last one it stored for that name.
// Each message also carries, as application properties, the producer's name (PropProducer), its
// publishing id and its position: the timeline and LSN of its transaction's commit record and its
// index among the transaction's rows (Position). Positions grow in commit order, on every
// timeline. Its event type, aggregate type and aggregate id are application properties too
// (PropEventType), and so are a parked message's reason, table and LSN (PropParkReason).
//
// At the start of a session Bind asks the broker for the producer's last stored id, and reads
// the stream back from its end to the last message of that producer: its id and position are
// the anchor. A message at or before the anchor is stored already: Publish confirms it at once and
// sends nothing. The first message after the anchor gets the last id plus one, the next one more,
// and so on. So every session numbers the same messages the same way: a message's id is the
// anchor's id plus its rank after the anchor, whichever session computes it. A replay that
// reaches the broker anyway (an old session's, still in flight) carries the ids the broker
// stored already, and is dropped. docs/streams.md has the whole argument and where it ends.
//
// # Confirms
//
// Confirms yields one verdict per message Publish or Park accepted: nil once the broker stored
// (or dropped as a duplicate) the message. A message the broker did not confirm ends the session:
// the channel yields an error with sequence number 0 and closes, and the relay starts again from
// the slot. A message too large for a frame is unpublishable: Publish says so and the relay parks
// it, into the stream ParkStream names, at least once.
package streampub
