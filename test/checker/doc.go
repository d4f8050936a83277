// Package checker is a workload writer and a delivery verifier for walbox's fault tests, in the
// manner of a Jepsen checker: a Writer commits outbox rows and records which ones committed, a
// Verifier records what a queue delivered, and Check compares the two.
//
// # The workload
//
// A Writer commits outbox rows in transactions of random size (seeded, so a run can be
// repeated). Every row belongs to one of a few aggregates and carries a sequence number per
// aggregate in its payload, {"aggregate": "agg-3", "seq": 17}, assigned in the order the rows are
// written. The Writer is the only writer of its rows and commits one transaction at a time, so
// commit order and sequence order agree.
//
// A row counts as committed once COMMIT returned success. When COMMIT fails without an answer
// from the server (the connection broke, the server crashed), the outcome is unknown; the Writer
// then resolves it by looking the transaction's ids up in the table once it can reach the server
// again. Rows of a transaction that did not commit are forgotten; their sequence numbers are left
// as gaps.
//
// # The verdict
//
// Check takes the committed rows and the deliveries, in the order the consumer received them:
//
//   - committed: rows the Writer knows committed;
//   - delivered: deliveries received, duplicates included;
//   - lost: committed rows never delivered. Must be 0;
//   - phantom: distinct message ids delivered that were never committed. Must be 0;
//   - duplicated: deliveries of an id beyond its first. Allowed (delivery is at least once);
//   - order violations: among first deliveries only (the first delivery of each id), per
//     aggregate, the number of first deliveries whose seq is lower than the highest seq of an
//     earlier first delivery of the same aggregate. walbox publishes in commit order and a replay
//     resends in the same order, so first deliveries arrive in commit order; redeliveries after
//     a replay repeat older seqs by design and are not counted. Must be 0;
//   - malformed: deliveries without a message id or with a body that is not the Writer's JSON;
//     mismatched: deliveries whose body disagrees with the committed row of the same id. Both
//     must be 0.
//
// Report.Err returns an error naming what broke, or nil.
package checker
