// Package prune deletes old outbox rows in short batches, each its own transaction, by the
// server's clock. It deletes only rows below the transaction horizon that every slot relaying the
// table confirmed, by their records in walbox_slots (ReadHorizon), whatever their age: the rows a
// slot may not have confirmed are the ones walbox recover republishes. It records its deletes in
// walbox_deletes, in the deleting transaction, so that recover can tell them from others. It is
// safe while walbox runs: the relay reads inserts from the WAL, and the publication it streams
// publishes no deletes.
package prune
