// Package slots administers walbox's replication slots: it creates a slot and records it
// (EnsureSlot), recovers a lost one (Recovery), drops one (Drop), changes the number of shards
// (Reshard: the new set beside the old one, then the wait for the cut) and retires the old set
// once a reshard passed its cut (Retire). The relay in package replication streams from a
// slot; before each session it holds the slot against its record with Prepare, which creates the
// slot only where none was ever recorded, records (adopts) one that exists unrecorded, and makes
// an existing one a failover slot when asked.
//
// The record itself is package registry's: the table walbox_slots and the functions that move
// it. This package decides when a record starts (EnsureSlot, with the slot's consistent point
// and what the publication covers; Prepare, for a slot the relay creates or adopts) and when it
// is reset (Recover, once every row of the gap was confirmed by the broker). A slot that is
// missing though recorded is never recreated here without walbox recover: that would skip the
// rows committed since it vanished.
//
// # Recover
//
// Recovery replaces a slot that was lost, dropped, recreated behind walbox's back, or that walbox
// run stopped on. It creates the new slot first, with an exported snapshot, and republishes from
// the outbox tables, in that snapshot, every row whose inserting transaction may have committed
// after the recorded position (the record's xmin horizon tells them). Only once the broker
// confirmed each one does it reset the record. Rows can go out twice, never zero times.
package slots
