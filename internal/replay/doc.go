// Package replay is walbox replay. It republishes rows of the outbox tables, chosen by filters,
// with their original message ids. It runs beside a running relay and never moves a slot.
//
// A replay can send only rows still in the tables. Rows a producer deleted as it inserted them are
// beyond it, and so are rows walbox prune deleted. Messages of the emit function are logical
// decoding messages, in no table: beyond it too. A table whose ids come from commit positions is
// refused. A row read from the table has no position, so it would get another id.
//
// Which rows: those of transactions that ended before the replay first started, matching every
// filter given. A row whose deliver_at is ahead is left to the relay's schedule. The time filters
// compare the commit time where the server tracks it (track_commit_timestamp). Else they compare
// the mapped created_at column. See docs/operations.md.
//
// Order: each table's rows, one table after another. Within a table, by inserting transaction id,
// then statement (cmin), then physical place (ctid). Transaction ids follow start order, not commit
// order. An aggregate written by overlapping transactions may come out of commit order.
//
// Progress lives in walbox_replays, beside walbox_slots. A replay is named by a hash of its tables
// and filters. Each second, and at each table's end, the run waits for the broker's confirms. Then
// it records the last statement confirmed whole. Killed at any moment and run again, a replay
// resumes after that statement. Rows after it are sent again: duplicates only. A finished replay's
// progress is deleted, so the same command later replays again. Two runs of one replay at once are
// refused: the first holds an advisory lock while it runs.
package replay
