// Package status reads what `walbox status` shows. It reads the replication slot's position, lag
// and state, and the sets of shards that publish the outbox table. It reads a reshard in progress,
// and whether messages without rows are relayed. It reads what the running relay reports at its
// /status. Verdict judges it all for the command's exit code. It reads over an ordinary connection,
// from the catalogs (package inspect), and writes nothing. See docs/architecture.md for the relay
// it reports on.
package status
