// Package schedule holds messages due after their commit (wire.Message.DeliverAt) in the database.
// So the slot need not wait for them.
//
// A Recorder is the relay's publishing session with one more verb, Schedule. It numbers what it
// records among the messages it publishes. It writes the recorded messages in batches, one
// transaction each, when the relay flushes. Only once that transaction committed does it confirm
// them. So the relay's checkpoint.Ledger, the one record of what is in flight, treats a recorded
// message as a confirmed one. The slot moves past a scheduled row only after its record committed.
//
// A Sender publishes the due messages of the relay's slot, in deliver_at order, with confirms. It
// deletes them from the schedule only after the broker's confirms. It publishes the next batch while
// the confirms of the one before come back. Each batch commits after its own. It runs only while its relay
// holds the slot. Rows it sends are locked (FOR UPDATE SKIP LOCKED), so two senders never send one
// message at once. Due means due by the database's clock.
//
// walbox_schedule_done notes each sent id once, under the empty slot name; sent_by names its slots.
// Cancels write their tombstones there too, in state cancelled. So a cancel that cannot see a
// sending conflicts with it. A batch deletes its rows by their place (ctid), locked since its read.
//
// The tables are walbox_schedule and walbox_schedule_done, beside walbox_slots in the registry's
// schema (migrations). docs/outbox.md#scheduled-delivery states the guarantees.
//
// NewRecorder wraps a numbered session; Wrap also opens the Recorder's database connection.
package schedule
