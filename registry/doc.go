// Package registry is walbox's record, in the database, of the replication slots it created or
// streamed from, with the last position it confirmed on each.
//
// A relay process forgets everything when it restarts; the database does not. Before the relay
// reports a position to the server it records it here, so the slot's confirmed_flush_lsn is never
// ahead of the recorded position by walbox's doing. A slot that is missing although recorded, or
// whose confirmed position is ahead of the record, or that lives on another system, was dropped,
// recreated or advanced behind walbox's back: rows may have been skipped, and the relay stops
// instead of carrying on (see replication). A stop that only walbox recover gets past is recorded
// too (RecordStop), so that the next process, walbox doctor and walbox status see it. Only an
// explicit operator act (walbox recover) resets a record, and clears its stop.
//
// migrations.ApplyRegistry creates the table walbox_slots and the functions the relay writes
// through (migrations.RecordFunctions), which run with the owner's rights so that a relay role
// with nothing but LOGIN REPLICATION can use them. Only the owner and the relay's role (`walbox
// migrate --relay-role`) may execute them: whoever may can move a record past a gap.
//
// Beside the records, walbox_deletes counts the deletes walbox can explain (Deletes): walbox
// prune's, and those walbox recover --accept-loss accepted. Recover refuses a gap while the
// server's statistics count other deletes from an outbox table.
package registry
