package wire

import (
	"context"
	"errors"
	"time"
)

// The vocabulary of publishing: the contract between the relay and a publishing session, and the
// values it speaks in. Both sides must name them and neither may import the other. The packages
// publisher and streampub implement Publisher without importing replication. That package links the
// PostgreSQL driver, and it never imports them. This one interface is replication.Publisher,
// slots.Publisher and publishertest.Publisher. Those are the names their users know.

// Publisher is one session of publishing with confirms. Publish is called from one goroutine, in
// stream order. It returns the message's sequence number (1, 2, 3, ... within the session). The
// message is valid only during the call: the caller reuses it for the next. Confirms yields one
// verdict per published message. A nil Err means the broker confirmed and routed it. After a
// failure the channel yields an error and closes.
//
// Park sets aside a message that can never be delivered as written, with the reason. It is
// confirmed like any other message. Publish reports such a message with an error wrapping
// ErrUnpublishable, having written nothing. An error wrapping ErrSessionClosed says the session is
// gone, whatever else it wraps.
type Publisher interface {
	Publish(ctx context.Context, m *Message) (uint64, error)
	Park(ctx context.Context, p *Parked) (uint64, error)
	Confirms() <-chan Confirm
	Close() error
}

// Flusher is implemented by a Publisher that holds back what Publish and Park hand it. It does so
// to write several messages at once. Flush means: nothing more to publish for now. The publisher
// then sends what it holds, at once or within a short bound that its Flush states. The relay calls
// Flush whenever it goes back to waiting: for WAL, for confirms or for the broker. An error says
// the session is gone, like a failed Publish.
type Flusher interface {
	Flush() error
}

// Confirm is the broker's verdict on one published message: Publisher.Confirms yields one per
// message that Publish or Park accepted.
type Confirm struct {
	Seq uint64 // the sequence number Publish returned (the delivery tag)
	Err error  // nil: the broker confirmed it and it was routed. Otherwise nacked, returned, or the session died.
	// At is when the verdict arrived from the broker; zero if the publisher does not say. The
	// reader may take it later, so latencies are measured to At, not to when it is read.
	At time.Time
	// Written is when the message's last frame was written to the broker's socket. Publishers may
	// hold frames back, to write several together. It is zero if the publisher does not say.
	Written time.Time
}

// ErrUnpublishable marks a message the broker can never accept as it stands. It may be too large,
// or have a routing key or header the protocol cannot carry. Sending it again fails again, so the
// relay parks it instead of retrying.
var ErrUnpublishable = errors.New("message can never be published")

// ErrSessionClosed marks the end of a publishing session: whatever it was doing, it will do no
// more. Messages without a verdict may or may not have reached the broker. A publisher's error
// wraps it when the session is gone. It does so whatever else the error also wraps (a context's
// deadline, say). So a caller never retries on a dead session.
var ErrSessionClosed = errors.New("session closed")

// ErrNotRecorded marks the end of a session whose record of scheduled messages failed (package
// schedule). The database refused the record, not the broker a message.
var ErrNotRecorded = errors.New("scheduled messages not recorded")

// ErrServerAnswered marks a failure to open a publishing session with a server that did answer. It
// refused the login or a declare. The server was reached, so its address is not in doubt.
var ErrServerAnswered = errors.New("the server answered")

// ErrConflict marks a session that found messages under the relay's own name on the broker. The
// session cannot continue from them: they are another writer's. A new session finds them again, so
// the relay stops instead of retrying.
var ErrConflict = errors.New("the broker holds messages this relay cannot continue from")

// Parked is a message that can never be delivered as written, set aside with the reason. It is what
// the relay hands to Publisher.Park.
type Parked struct {
	// Message is the row as far as it could be decoded.
	Message Message
	// Reason says why it was parked.
	Reason string
	// Table and LSN say where it came from.
	Table string
	LSN   string
	// Size is the payload's size in bytes where Message.Payload was dropped; 0 means its length.
	Size int
	// Database names the database of the row, as ParkedBy writes it; "" where unknown.
	Database string
}

// ParkedBy names a database for a parked copy: "<system identifier>/<name>". walbox parked
// acts only on its own database's parked copies.
func ParkedBy(system, database string) string { return system + "/" + database }

// DefaultAlternateExchange is the alternate exchange walbox declares for exchange. Messages no
// queue is bound for are kept there. Whoever declares the exchange (the relay, a consumer binding
// to it) declares it with the same alternate-exchange argument. Otherwise the broker refuses the
// second declaration.
func DefaultAlternateExchange(exchange string) string { return exchange + ".unroutable" }

// TooLargeError ends a publishing session when the broker refused a message for its size. RabbitMQ
// closes the channel with 406 PRECONDITION_FAILED. Its text is "message size N is larger than
// configured max size M" (16 MiB by default since 4.0). It does not say which message: the relay
// works that out from what it had in flight. A publisher's error wraps it beside ErrSessionClosed.
type TooLargeError struct {
	Reason string // the broker's words
	Err    error  // the broker's error
}

func (e *TooLargeError) Error() string {
	return "the broker refused a message for its size: " + e.Reason
}

func (e *TooLargeError) Unwrap() error { return e.Err }
