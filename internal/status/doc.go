// Package status reads what `walbox status` shows: the replication slot's position, lag and
// state, the sets of shards that publish the outbox table and a reshard in progress, whether
// messages without rows are relayed, and what the running relay reports at its /status. Verdict
// judges it for the command's exit code. It reads over an ordinary connection, from the catalogs
// (package inspect), and writes nothing.
package status
