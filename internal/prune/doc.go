// Package prune deletes old outbox rows in short batches, each its own transaction, by the server's
// clock. It deletes only rows below the transaction horizon that every slot relaying the table
// confirmed. ReadHorizon reads that horizon from the slots' records in walbox_slots. Rows above it
// stay, whatever their age: walbox recover republishes the rows a slot may not have confirmed.
// Prune records its deletes in walbox_deletes, in the deleting transaction. So recover can tell
// them from other deletes. It is safe while walbox runs: the relay reads inserts from the WAL. And
// the publication it streams publishes no deletes. See docs/architecture.md for the relay and
// recover.
package prune
