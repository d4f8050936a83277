// Package replication relays outbox rows from a PostgreSQL logical replication slot to a broker.
//
// A Relay owns one replication connection at a time, in one goroutine.
// Each session connects and inspects the server through package inspect, as walbox doctor does.
// It checks wal_level, the publication's coverage of every outbox table, the tables' columns and the slot.
// It then compares the slot with its record (package slots) and starts pgoutput at the slot's position.
// Every outbox insert goes to the Publisher as it arrives.
// The broker's confirms feed the session's checkpoint.Ledger.
//
// A Publisher may do more than wire.Publisher asks:
//
//   - a Flusher is told when the stream has nothing more to publish for now;
//   - a Positioner learns where each message comes from;
//   - a SystemBound learns the server's system identifier and the slot's database;
//   - an Anchored publisher has its anchor checked against the server's WAL;
//   - a Guarded publisher asks the session before each write whether it may still write.
//
// Package streampub is all of these.
//
// # States
//
// Run is a loop over sessions; Stats.State says where it is:
//
//	starting ──► streaming ──► (session ends) ──► retrying ──► starting ...
//	    │            │                                ▲
//	    │            └──► stalled (a refused message is retried one at a time) ──┘
//	    │                 (a refusal for size: one at a time until the row is known; parked next session)
//	    ├──► standby (another process streams from the slot; watch it; ask again every StandbyRetry)
//	    └──► failed (an error retrying cannot fix: Run returns it)
//	any state ──► stopped (Run's context ended; the last session shut down gracefully)
//
// Session setup is bounded like streaming (silence.go).
// Setup is the connection, the checks, the slot, the broker and START_REPLICATION.
// Streaming ends on a publish error, a nack, a return, a lost connection or a failed coverage check.
// The next session starts again from the slot.
//
// # The stream loop
//
// A streaming session is three goroutines, each the one owner of what it touches:
//
//   - the stream (stream.run) owns the session's state, the ledger and the publishing session;
//     it runs no SQL;
//   - the reader (reader.go) only reads the replication connection and queues what the server sends;
//   - the reporter (reporter.go) owns the watch connection, for coverage checks and the registry.
//     It writes every status update to the replication connection.
//
// The stream offers the reporter the watermark (reporter.offer).
// The reporter ends the session when the server stays silent, whatever the stream is doing.
//
// Each turn of stream.run computes its phase (stream.phase) and waits for the first of:
//
//   - WAL from the reader, in the phases that read;
//   - a confirm from the publisher;
//   - Run's context ending, or once it has, the shutdown deadline;
//   - the end of the connection or of the reporter.
//
// A confirm is applied as it arrives, whatever the loop was waiting for, except during a publish call.
// Confirms that arrive during a blocked publish are applied when the call returns or gives up.
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
// Errors leave any phase and end the session.
// They are a publish error, a nack or return, a lost or silent connection, a failed coverage check.
//
// The reader lends a frame of 1 MiB or more (a large row) instead of copying it (reader.go).
// It reads on only once the stream has handled that frame.
// So a large row is in memory about once, and only one at a time.
//
// The shutdown's timing is all in shutdown.go (stopClock).
// It logs the confirms it waits for when Run's context ends, and those it gave up on at the end.
// At the deadline it closes the publisher if a publish call is still in progress.
// That call may be a socket write that no context ends.
// After a graceful stop it waits for the publisher's close only until the deadline (closePublisher).
// The ledger is the only bound on messages in flight and their only record (window.go sets it up).
//
// # Where the slot can move
//
// One function sends a position to the server: reporter.report, on the reporter's goroutine.
// A checkpoint.Schedule says when. It runs:
//
//   - every StatusInterval, when the reporter's timer fires (reporter.tick);
//   - sooner once the stream went quiet, or passed half a window of messages since the last report;
//   - when a keepalive asks for a reply (stream.handleCopyData calls reporter.replyNow);
//   - at the end of a graceful stop (stream.finalReport, shutdown.go), through reporter.final;
//   - after a broker failure (stream.finalStatus), through reporter.final.
//
// The position it sends is
//
//	min(Ledger.Watermark(), watch.limit)
//
// after watch.record has written it to walbox_slots.
// An idle step (checkpoint.IdleStep) sends watch.recorded instead.
// An idle step that passes a point something waits for is recorded all the same (watch.owes).
// Such points are the xmin horizon after outbox transactions, and a reshard's cut.
//
// Ledger.Watermark moves in three places, all in stream.go:
//
//   - Ledger.Ack in stream.confirmOne: a broker confirm of every message up to a transaction's end.
//     A message due later is confirmed once its record in the schedule committed (Scheduler);
//   - Ledger.Commit in stream.handleWAL: a transaction's end once all its messages are confirmed;
//   - Ledger.AdvanceIdle in stream.handleCopyData: a keepalive's WAL end, with nothing in flight.
//
// An empty transaction moves it at once.
// AdvanceIdle moves it only with no transaction open.
// The stream offers the reporter the watermark after each (stream.offer).
//
// watch.limit starts each session at the slot's confirmed_flush_lsn (Relay.session, relay.go).
// It moves only in watch.check, to the WAL insert position read by the check before the last one.
// So the slot never passes a point where the publication's coverage was not verified.
// Nothing else moves it: not a row's LSN, not a commit's start, not anything the reader merely queued.
// Write, flush and apply positions are always set together and explicitly.
// Outside this package, package slots creates, recovers and retires slots (docs/architecture.md).
//
// With Config.ReplicationURL the slot is a hot standby's.
// The replication connection and the slot's reads go to the standby.
// The record and watch.check stay on the primary.
// The positions are of one WAL, so the primary's insert position caps the standby's slot too.
// The record is still written before each status update.
// The standby's replay position caps the positions too (watch.replicated).
// A position is reported only once the standby replayed its record.
// A standby promoted while --database-url names another server stops the relay (watch.checkStandby).
//
// # Failure
//
// Failure is handled by starting over: the next session starts again from the slot.
// So unconfirmed messages are sent again, in order, and delivery is at least once.
// Errors that retrying cannot fix end Run. Examples are:
//
//   - wal_level;
//   - a publication that no longer covers a table;
//   - a slot that is missing though recorded, or ahead of its record;
//   - a column the mapping needs, gone.
//
// Some of those the slot cannot get past even once the cause is put right.
// Examples are a column renamed in the WAL, or the publication dropped or changed after the check.
// They are recorded in the registry as the slot's stop (stop.go).
// Every later run refuses the slot, and walbox doctor and walbox status report the stop.
// The command walbox recover clears it: it republishes the rows from the outbox table.
//
// A message due after its commit goes to the Publisher's Scheduler, when it has one.
package replication
