// Package replication relays outbox rows from a PostgreSQL logical replication slot to a broker.
//
// A Relay owns one replication connection at a time, in one goroutine. Each session connects,
// checks the server (wal_level, publication, slot), starts pgoutput at the slot's
// confirmed_flush_lsn and streams: every outbox insert is handed to the Publisher as it arrives,
// and the broker's confirms feed a checkpoint.Tracker.
//
// When the slot moves. The flush position sent to the server is the tracker's watermark: the end
// LSN of the last transaction whose every message, and every message before it, the broker
// confirmed (acked and not returned). When nothing is in flight and no transaction is open, a
// keepalive's WAL end may be confirmed too, so that an idle outbox beside busy tables does not pin
// WAL. Nothing else moves it: not a row's LSN, not a commit's start LSN, not anything merely
// received. Write, flush and apply positions are always set together and explicitly.
//
// Failure is handled by starting over. Any publish error, nack, return, or lost connection ends
// the session; the next one starts again from the slot, so unconfirmed messages are sent again, in
// order. Delivery is therefore at least once. Errors that retrying cannot fix (wal_level, a missing
// publication, an invalidated slot, a row that can never become a message) end Run.
package replication
