// Package wire is the shared vocabulary of walbox: the Message that travels from an outbox row
// to the broker, the contract of the table it is stored in (Table, Mapping), and the contract of
// a publishing session (Publisher, Flusher) with the values the relay and its publisher exchange
// (Confirm, Parked, ErrUnpublishable, ErrSessionClosed). It has
// no behaviour beyond validation and no dependency on a database or broker driver, so every other
// package can depend on it: the relay core (replication, decoder, checkpoint, publisher) links no
// producer code through it.
//
// The producer library, which writes messages into a caller's transaction, is package outbox; it
// names these types under the same names (outbox.Message is Message).
package wire
