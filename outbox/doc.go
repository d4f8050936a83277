// Package outbox is walbox's producer library. Write, WriteSQL and Emit put messages into an outbox
// table, inside the caller's transaction. Or they emit them as logical decoding messages, inside
// that transaction too. So the messages are published if and only if the transaction commits. See
// docs/architecture.md for the relay that publishes them.
//
// Cancel removes a scheduled message through the SQL function CancelFunction (walbox_cancel).
//
// The message and the table contract are defined in package wire. That is the shared vocabulary
// that the relay uses too. This package names them under the same names (Message, Table, Mapping,
// ...). So producers need import only this package. It does not name what only the relay and its
// publisher exchange. That is wire.Confirm, wire.Parked, wire.ErrUnpublishable and
// wire.ErrSessionClosed.
package outbox
