// Package wire is the shared vocabulary of walbox. It holds:
//   - the Message that travels from an outbox row to the broker;
//   - the contract of the table it is stored in (Table, Mapping);
//   - the contract of a publishing session (Publisher, Flusher);
//   - the values the relay and its publisher exchange (Confirm, Parked, ErrUnpublishable,
//     ErrSessionClosed).
//
// It has no behaviour beyond validation and no dependency on a database or broker driver. So every
// other package can depend on it. The relay core (replication, decoder, checkpoint, publisher)
// links no producer code through it. See docs/architecture.md for the packages that speak it.
//
// The producer library, which writes messages into a caller's transaction, is package outbox. It
// names these types under the same names (outbox.Message is Message).
package wire
