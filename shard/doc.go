// Package shard splits one outbox table over several replication slots by a stable hash of the
// aggregate id. So several relays share the work, and every aggregate keeps its commit order.
// See docs/architecture.md for the relay that reads each slot.
//
// A set of N shards is N publications of the outbox table, and N slots, one per publication.
// Each publication has a PostgreSQL 15 row filter that selects the rows of one shard:
//
//	CREATE PUBLICATION walbox_s0of3 FOR TABLE public.outbox
//	    WHERE (((hashtext(coalesce(aggregate_id, '')) & 2147483647) % 3) = 0)
//	    WITH (publish = 'insert')
//
// The function hashtext is an immutable built-in, so the server evaluates the filter in the
// walsender. And the expression is total. The mask keeps the hash's 31 low bits, so it is never
// negative: abs of hashtext's -2147483648 would overflow. A NULL aggregate id counts as the empty
// string. For every row and every N exactly one of the N filters is true.
// Of computes the same shard in Go (HashText is PostgreSQL's hash_bytes on a little-endian server).
//
// A set of one shard is the single-slot setup. The publication and slot carry the base names, and
// the publication has no row filter. The row filter a publication holds, not its name, is the
// record of the shard it serves. ParseFilter reads it back.
// A relay refuses a publication whose filter is not the one for its shard and count.
package shard
