// Package replication relays outbox rows from a PostgreSQL logical replication slot to a broker.
//
// A Relay owns one replication connection at a time, in one goroutine. Each session connects,
// inspects the server through package inspect (wal_level, the publication's coverage of every
// outbox table, the tables' columns, the slot: the same reading and judgement as walbox doctor),
// holds the slot against its record in package registry, starts pgoutput at the slot's
// confirmed_flush_lsn and streams: every outbox insert is handed to the Publisher as it arrives,
// and the broker's confirms feed the session's checkpoint.Ledger.
//
// A Publisher may do more than wire.Publisher asks. A Flusher is told when the stream has
// nothing more to publish for now. A Positioner learns where each message comes from, and a
// SystemBound the server's system identifier and the slot's database. An Anchored publisher has
// its anchor checked against the server's WAL and read again once the slot is held; a Guarded
// one asks the session before each write whether it may still hold the slot (package streampub
// is all of these).
//
// # States
//
// Run is a loop over sessions; Stats.State says where it is:
//
//	starting ──► streaming ──► (session ends) ──► retrying ──► starting ...
//	    │            │                                ▲
//	    │            └──► stalled (a refused message is retried one at a time) ──┘
//	    │                 (a refusal for size: one at a time until the row is known; parked next session)
//	    ├──► standby (another process streams from the slot; ask again every StandbyRetry)
//	    └──► failed (an error retrying cannot fix: Run returns it)
//	any state ──► stopped (Run's context ended; the last session shut down gracefully)
//
// Session setup (connect, inspect, slot, broker, START_REPLICATION) is bounded like streaming
// (silence.go). Streaming ends on any publish error, nack, return, lost connection or failed
// coverage check; the next session starts again from the slot.
//
// # The stream loop
//
// A streaming session is three goroutines, each the one owner of what it touches. The stream's
// goroutine (stream.run) owns the session's state, the ledger and the publishing session; it
// runs no SQL. The reader (reader.go) only reads the replication connection and queues what the
// server sends. The reporter (reporter.go) owns the watch connection (the coverage checks and the
// registry) and every status update written to the replication connection; the stream hands it
// the watermark (reporter.offer), and it ends the session when the server stays silent, whatever
// the stream is doing. Each turn of stream.run computes its phase (stream.phase) and waits for
// the first of: WAL from the reader (in the phases that read), a confirm from the publisher,
// Run's context ending (or, once it has, the shutdown deadline), and the end of the connection
// or of the reporter. A confirm is applied as it arrives, whatever the loop was waiting for,
// except during a publish call: those that arrive while the broker holds a publish up are
// applied when the call returns or gives up.
//
//	            ┌──────── confirm ────────┐
//	            ▼                         │
//	      ┌───────────┐  Window in flight ┌─────────────┐
//	      │ streaming │ ────────────────► │ window full │
//	      └───────────┘                   └─────────────┘
//	        │   ▲  a publish outlasts a status interval: publish blocked
//	        │   └─ (the reporter reports; the publish gives up, confirms are applied, it retries)
//	        │ Run's context ends (from either phase above; the shutdown deadline starts)
//	        ├── inside a transaction ──► finishing (read on to its commit) ──┐
//	        └── at a boundary ─────────────────────────────────────────────┴──► draining
//	                                                    (await the confirms in flight)
//	finishing, draining ── deadline passed, or nothing in flight ──► stopped (final status)
//
// Errors leave any phase and end the session: a publish error, a nack or return, a lost or
// silent connection, a failed coverage check.
//
// The reader lends a frame of 1 MiB or more (a large row) instead of copying it, and reads on only
// once the stream has handled it (reader.go): a large row is in memory about once, and only one
// at a time. The shutdown's timing is all in shutdown.go (stopClock): it logs the confirms it
// waits for when Run's context ends, and those it gave up on at the end; at the deadline it
// closes the publisher if a publish call is still in progress, since that call may be a socket
// write no context ends. After a graceful stop it waits for the publisher's close only until the
// deadline (closePublisher). The ledger, the only bound on messages in flight and the only record
// of them, is package checkpoint's (window.go sets it up).
//
// # Where the slot can move
//
// One function sends a position to the server: reporter.report (reporter.go), on the reporter's
// goroutine. It runs
//
//   - when the status timer fires (reporter.tick): every StatusInterval, and sooner for a
//     watermark that moved once the stream went quiet or the watermark passed half a window of
//     messages since the last report (reporter.soon);
//   - when a keepalive asks for a reply (stream.handleCopyData calls reporter.replyNow);
//   - for stream.finalReport at the end of a graceful stop (shutdown.go), and stream.finalStatus
//     after a broker failure (stream.run), through reporter.final.
//
// The position it sends is
//
//	min(Ledger.Watermark(), watch.limit)
//
// (held at watch.recorded for an idle step, see idleStep) after watch.record has written it to
// walbox_slots. Ledger.Watermark moves in three places, all in stream.go: Ledger.Ack in
// stream.confirmOne (a broker confirm of every message up to a transaction's end),
// Ledger.Commit in stream.handleWAL (a transaction's end LSN once all its messages are
// confirmed; an empty transaction at once) and Ledger.AdvanceIdle in stream.handleCopyData (a
// keepalive's WAL end, taken only when nothing is in flight and no transaction is open). The
// stream offers the reporter the watermark after each (stream.offer).
// watch.limit starts each session at the slot's confirmed_flush_lsn (Relay.session, relay.go)
// and moves only in watch.check: to the WAL insert position read by the check before the last
// successful one, so the slot never passes a point where the publication's coverage was not
// verified. Nothing else moves it: not a row's LSN, not a commit's start LSN, not anything merely
// received or queued by the reader. Write, flush and apply positions are always set together and
// explicitly. Besides the stream, these places touch the slot, none of them moving an existing
// one: creating it where none was ever recorded (slots.Create, called by slots.Prepare, which
// Relay.prepareSlot calls for `walbox run`, and by slots.EnsureSlot for `walbox migrate` and
// `walbox reshard`); walbox recover, which replaces it (slots.Recovery.Recover); and `walbox
// reshard --retire`, which drops the old set's slots once each passed the cut (slots.Retire).
// slots.Prepare may also make an existing inactive slot a failover slot,
// which does not move it.
//
// With Config.ReplicationURL the slot is a hot standby's: the replication connection and the
// slot's reads go to the standby, while the record and watch.check stay on the primary. The
// positions are one WAL, so the primary's insert position caps the standby's slot as it would
// the primary's, and the record is still written before each status update. The standby's replay
// position caps the positions too, and a position is reported only once the standby replayed its
// record (watch.replicated); a standby promoted while --database-url names another server stops
// the relay (watch.checkStandby).
//
// # Failure
//
// Failure is handled by starting over: the next session starts again from the slot, so
// unconfirmed messages are sent again, in order. Delivery is therefore at least once. Errors
// that retrying cannot fix (wal_level, a publication that no longer covers a table, a slot that
// is missing though recorded or ahead of its record, a column the mapping needs gone) end Run.
// Of those, the ones the slot cannot get past even once the cause is put right (a column renamed
// in the WAL, the publication dropped or changed after this process checked it) are recorded in
// the registry as the slot's stop (stop.go): every later run refuses the slot, walbox doctor and
// walbox status report the stop, and walbox recover, which republishes the rows from the outbox
// table, clears it.
package replication
