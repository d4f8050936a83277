// Package shard splits one outbox table over several replication slots by a stable hash of the
// aggregate id, so that several relays share the work and every aggregate keeps its commit order.
//
// A set of N shards is N publications of the outbox table, each with a PostgreSQL 15 row filter
// that selects the rows of one shard, and N slots, one per publication:
//
//	CREATE PUBLICATION walbox_s0of3 FOR TABLE public.outbox
//	    WHERE (((hashtext(coalesce(aggregate_id, '')) & 2147483647) % 3) = 0)
//	    WITH (publish = 'insert')
//
// hashtext is an immutable built-in, so the server evaluates the filter in the walsender, and the
// expression is total: the mask keeps the hash's 31 low bits, so it is never negative (abs of
// hashtext's -2147483648 would overflow), and a NULL aggregate id counts as the empty string. For
// every row and every N exactly one of the N filters is true. Of computes the same shard in Go
// (HashText is PostgreSQL's hash_bytes on a little-endian server).
//
// A set of one shard is the single-slot setup: the publication and slot carry the base names and
// the publication has no row filter. The row filter a publication holds, not its name, is the
// record of the shard it serves: ParseFilter reads it back, and a relay refuses a publication
// whose filter is not the one for its shard and count.
package shard
