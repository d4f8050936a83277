// Package registry is walbox's record, in the database, of the replication slots it created or
// streamed from. Each record holds the last position walbox confirmed on its slot. See
// docs/architecture.md for the relay that writes the records.
//
// A relay process forgets everything when it restarts; the database does not. Before the relay
// reports a position to the server it records it here. So the slot's confirmed_flush_lsn is never
// ahead of the recorded position by walbox's doing. Some slots were dropped, recreated or advanced
// behind walbox's back:
//   - a slot that is missing although recorded;
//   - a slot whose confirmed position is ahead of the record;
//   - a slot that lives on another system.
//
// Rows may have been skipped, and the relay stops instead of carrying on (see replication). A stop
// that only walbox recover gets past is recorded too (RecordStop). So the next process, walbox
// doctor and walbox status see it. Only an explicit operator act (walbox recover) resets a record,
// and clears its stop.
//
// The function migrations.ApplyRegistry creates the table walbox_slots. It creates the functions
// the relay writes through too (migrations.RecordFunctions). They run with the owner's rights, so a
// relay role with nothing but LOGIN REPLICATION can use them. Only the owner and the relay's role
// (`walbox migrate --relay-role`) may execute them. Whoever may can move a record past a gap.
//
// Beside the records, walbox_deletes counts the deletes walbox can explain (Deletes). Those are
// walbox prune's, and those walbox recover --accept-loss accepted. Recover refuses a gap while the
// server's statistics count other deletes from an outbox table.
package registry
