// Package slots administers walbox's replication slots:
//   - it creates a slot and records it (EnsureSlot);
//   - it recovers a lost one (Recovery);
//   - it drops one (Drop);
//   - it changes the number of shards (Reshard): the new set beside the old one, then the wait for
//     the cut;
//   - it retires the old set once a reshard passed its cut (Retire).
//
// The relay in package replication streams from a slot. Before each session, Prepare compares the
// slot with its record. It creates the slot only where none was ever recorded. It records (adopts)
// one that exists unrecorded. It makes an existing one a failover slot when asked. See
// docs/architecture.md for the relay and the registry.
//
// The record itself is package registry's: the table walbox_slots and the functions that move it.
// This package decides when a record starts:
//   - EnsureSlot starts it, with the slot's consistent point and what the publication covers;
//   - Prepare starts it, for a slot the relay creates or adopts.
//
// It decides when a record is reset: Recover resets it once the broker confirmed every row of the
// gap. A slot that is missing though recorded is never recreated here without walbox recover. That
// would skip the rows committed since it vanished.
//
// # Recover
//
// Recovery replaces a slot that was lost, dropped or recreated behind walbox's back. It replaces
// one that walbox run stopped on too. It creates the new slot first, with an exported snapshot. In
// that snapshot it republishes rows from the outbox tables. It republishes every row whose
// inserting transaction may have committed after the recorded position. The record's xmin horizon
// tells them. Only once the broker confirmed each one does it reset the record. Rows can go out
// twice, never zero times.
package slots
