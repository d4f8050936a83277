// Package consumer consumes messages from a RabbitMQ queue and runs a handler for each of them.
// The handler's database writes apply exactly once per message id. New fills in a zero Config
// field with its default and checks the rest (Config.Validate).
//
// # Contract
//
// For every delivery, the consumer begins a transaction and records (ConsumerName, MessageId) in
// the processed-messages table. It runs the handler in the same transaction and commits. Only
// then does it acknowledge the delivery.
//
// A message whose id is already recorded is a duplicate. The relay delivers at least once, and
// a lost ack brings a message back. A duplicate is acknowledged without running the handler.
// So the handler's writes through tx are committed once per message id and consumer. They
// commit together with the processed row, or not at all. Anything else the handler does
// happens at least once: an HTTP call, an email. A handler may run again when an earlier run
// did not commit.
//
// Deliveries are handled one at a time, in the order the queue delivers them. Prefetch only
// lets the broker send the next ones ahead. A retried message comes back after those behind it.
//
// # Failures
//
//   - Handler error or panic: the transaction rolls back (no processed row, no writes) and the
//     message is retried. The consumer publishes a copy to a retry queue "<Queue>.retry.<N>ms".
//     The copy carries the attempt count in header x-walbox-attempts. The consumer
//     acknowledges the original once the broker confirmed the copy. Each retry queue has a
//     fixed message TTL. It dead-letters expired messages back to Queue through the default
//     exchange, so a retry reaches this queue alone. Delays start at RetryBackoff and double
//     up to RetryBackoffMax. One queue per distinct delay keeps expiry in order. This needs no
//     plugin and works on RabbitMQ 3.10. After MaxAttempts attempts the message goes to
//     DeadLetterQueue.
//   - A handler that ends tx itself, or leaves it failed, fails that attempt too. That holds
//     for tx.Commit, tx.Rollback and its own COMMIT or ROLLBACK statement. A retry after its
//     own commit is a duplicate. A held message its handler committed leaves the hold, handled.
//   - No message id: the message goes to DeadLetterQueue unhandled.
//   - Dead letters keep the body and properties. Header x-walbox-error carries the reason.
//     Headers x-walbox-routing-key and x-walbox-exchange say where the message was first
//     published. They also carry x-walbox-attempts and x-walbox-consumer. To replay one,
//     publish it to Queue again without x-walbox-attempts, or it gets a single attempt.
//   - Database error in the consumer's own statements (begin, the processed row, commit): the
//     consumer keeps the delivery. It tries again after a pause, which grows while errors
//     repeat. If a commit failed after all, the processed row makes the next try a duplicate.
//     Returning it to the queue would count towards a quorum queue's delivery limit.
//   - Broker connection lost: Run redials with backoff, declares the topology again and
//     resumes. Unacknowledged deliveries come back from the broker, and duplicates are skipped.
//   - Some errors no retry can cure: access refused, a queue declared with other arguments, a
//     missing processed table (see Fatal). They end Run with that error.
//
// Run stops on its context. It takes no new delivery and lets the in-flight handler finish and
// commit. It acknowledges that message and returns nil. A handler still running
// ShutdownTimeout later has its context cancelled. Run then returns an error, and the message
// is redelivered.
//
// # Caveats
//
//   - RabbitMQ moves expired messages from a retry queue back to Queue without publisher
//     confirms. On one node that is safe; in a cluster a node failure during the move can lose
//     the retry.
//   - A handler that kills the process is not counted as an attempt. The message comes back
//     with Redelivered set and the same Attempt.
//   - A quorum queue counts each return of a message: a nack with requeue, a closed channel.
//     RabbitMQ 4.0 drops a message returned more than 20 times by default. The consumer declares a new
//     quorum Queue and DeadLetterQueue with x-delivery-limit 2147483647, in effect none, unless
//     QueueArgs sets one. A queue that exists without it keeps its arguments: the broker refuses
//     a change. Run then reports ErrNoDeliveryLimit to OnError, with the policy to set.
//   - The processed table grows by one row per message. Prune it by processed_at once a
//     redelivery that old can no longer happen.
//
// # Partitions
//
// With Config.Partitions, the consumer declares a consistent-hash exchange and that many
// partition queues. Each aggregate's messages go to one of them, hashed on header aggregate_id.
// Processes of one ConsumerName share the partitions through leases in the database, renewed by
// heartbeat. A process stops a partition before its lease ends; another takes it only after.
// Each handling transaction checks the lease and locks it, so a late commit cannot follow a
// takeover. A message that fails holds its aggregate: it and the aggregate's later messages
// are stored in the database and acked. It is retried from there, up to MaxAttempts, then waits
// for Release or Skip. Other aggregates go on. See docs/outbox.md.
//
// # Streams
//
// Package consumer/streamconsumer reads a RabbitMQ stream instead of a queue, with the same
// Handler and Delivery. It lives apart so that a queue consumer does not link the stream client.
//
// With Config.Partitions, a consistent-hash exchange spreads messages over queues by
// HeaderAggregateID. A message that fails for good holds its aggregate. Release and Skip let the
// held messages through; they return ErrNotHeld for an aggregate that holds nothing.
// Consumer.HeldMessages counts what waits. Run stops with ErrPartitionsChanged when Partitions
// differs from the count the database's leases record. A skipped message is recorded as processed.
//
// The package does not log. Errors it recovers from go to Config.OnError, a handler's as a
// *MessageError. See docs/architecture.md for where the consumer stands in walbox.
package consumer
