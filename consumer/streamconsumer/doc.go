// Package streamconsumer reads a RabbitMQ stream and runs a consumer.Handler for each message,
// exactly once per offset.
//
// New fills in a zero Config field with its default and checks the rest (Config.Validate).
//
// # Contract
//
// The handler's transaction also stores the offset of the next message in Config.OffsetTable.
// So a message is handled again only if its transaction did not commit. The consumer needs no
// row per message. Messages are handled one at a time, in stream order. A failing message is
// retried in place, the messages behind it waiting. A handler that ends its transaction
// itself, or leaves it failed, is failing too. The offset is stored before the handler runs,
// so a retry after the handler's own commit finds the message handled. After MaxAttempts
// attempts the message goes to DeadLetterStream, exactly once: a named producer, with the
// offset as publishing id. Dead letters carry consumer.HeaderError, HeaderAttempts and
// HeaderConsumer as application properties. Two instances with one ConsumerName never both
// handle a message: the offset row is locked and checked in each transaction.
//
// # No partitions
//
// Config has no Partitions: a stream is read in order by one consumer, so each aggregate's
// order holds already. The queue consumer's partitions (consumer.Config.Partitions) spread a
// queue over processes; a stream does not need them. A failing message holds the whole stream,
// not only its aggregate.
//
// # A stored offset outside the stream
//
// Before it reads, a session checks the stored offset against the stream. Below the stream's
// first message, retention removed messages the consumer never handled. Past the stream's end,
// the stream was deleted and declared again. Either way Run gives an *OffsetError to OnError
// and returns it, unless Config.OffsetReset accepts a reset. A reset is stored in the offset
// table and reported to OnError too. A stream declared again that already holds more messages
// than the stored offset cannot be told from the old one.
//
// The package does not log. Errors it recovers from go to Config.OnError, a handler's as a
// *consumer.MessageError. A handler cut short by the end of Run's context reports none: its
// message is abandoned, not failed. See docs/streams.md for the stream path as a whole, and
// docs/architecture.md for the rest of walbox.
package streamconsumer
