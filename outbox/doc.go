// Package outbox is walbox's producer library: Write, WriteSQL and Emit put messages into an
// outbox table, or emit them as logical decoding messages, inside the caller's transaction, so
// that they are published if and only if it commits.
//
// The message and the table contract are defined in package wire, the shared vocabulary that
// the relay uses too; this package names them under the same names (Message, Table, Mapping, ...)
// so that producers need import only this package. What only the relay and its publisher
// exchange (wire.Confirm, wire.Parked, wire.ErrUnpublishable, wire.ErrSessionClosed) is not
// named here.
package outbox
