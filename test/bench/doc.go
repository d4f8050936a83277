// Package bench measures walbox beside the broker's ceiling and a polling relay, on the same data,
// in one run, and reports the figures as a markdown table and an SVG chart. test/cmd/walbox-bench is its
// command; docs/performance.md explains the results.
//
// # Contenders
//
//   - ceiling: a raw amqp091 publisher with pipelined confirms (the same window as walbox), the
//     same messages, exchange and queue type, and no database;
//   - no confirms: the ceiling as relays that do not wait for the broker publish: transient
//     messages, not mandatory, without confirms; what durability costs is the gap to the ceiling;
//   - walbox: the real `walbox run` binary;
//   - polling: the classic relay, UPDATE … SET published_at = now() WHERE id IN (SELECT … ORDER BY
//     seq LIMIT batch FOR UPDATE SKIP LOCKED) RETURNING …, publish the batch with pipelined
//     confirms, wait for all of them, commit; poll again at once after a full batch, else after the
//     poll interval (100 ms or 1 s).
//
// ClusterScenarios run on a RabbitMQ cluster (StartClusterServers) into a quorum queue, with
// contenders that publish on several connections: the ceiling with three publishers, one per
// node, and walbox with three lanes; the report then sets each beside the one-publisher ceiling.
//
// Every contender is a process of its own, so that its CPU time and peak RSS can be read from
// /proc/<pid>. The ceiling and the polling relay are this program (or test binary) run again in a
// child role; see RunChild.
//
// # What is measured
//
// A drain scenario commits a backlog first, then starts the relay with a consumer attached to the
// queue, and measures throughput as messages over the time between the first and the last
// delivery to that consumer. A steady scenario starts the relay, commits rows at a fixed rate
// (single-row transactions from several connections), and measures for every row the time from
// the producer seeing its COMMIT return to the consumer receiving the message: end-to-end latency,
// which bounds commit-to-confirm from above within the broker's delivery time. walbox's confirm
// time cannot be observed from outside its process.
//
// For walbox a steady scenario also splits the median into legs, from walbox's histograms (commit to
// read, to publish, to the socket write that carried the message, to confirm) and the consumer:
// the report's "Where the median goes". Config.BaselineBin runs a second walbox build beside the
// first in the same run (WithBaseline), for build against build figures; AlternateBaseline swaps
// their places scenario by scenario, since the one that runs second pays more broker CPU.
//
// A steady scenario's Load may instead be Pgbench: PostgreSQL's pgbench, a process of its own,
// commits the window's rows at the rate (-R, with -t rows per producer connection for an exact
// count), each row stamped with clock_timestamp() as it is inserted, and latency runs from that
// insert to the consumer. pgbench's per-transaction log gives its achieved rate and how late it
// started each transaction against its schedule (Result.LoadLag), which tells a late load from a
// slow relay. Such scenarios run only the contenders that read PostgreSQL.
//
// CPU seconds (utime+stime from /proc/<pid>/stat, before and after the measured window) are
// reported for the relay process, for all PostgreSQL processes together (children of the
// postmaster, plus the postmaster's reaped children) and for the broker's Erlang VM (every node's,
// on a cluster). Peak RSS is
// the relay's VmHWM. WAL is pg_current_wal_insert_lsn() before and after: the inserts' WAL is
// measured on its own (the backlog, or a warm-up batch in steady runs), and what the relay adds
// is the rest.
package bench
