// Package prune deletes old outbox rows in short batches, each its own transaction, by the
// server's clock. It is safe while walbox runs: the relay reads inserts from the WAL, and the
// publication it streams publishes no deletes.
package prune
