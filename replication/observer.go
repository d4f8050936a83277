package replication

import (
	"time"

	"github.com/walbox/walbox/wire"
)

// Observer is told what the relay does, for metrics.
// Observe is called on the relay's goroutine, once per message at least.
// So it must be quick and must not block.
type Observer interface {
	Observe(Event)
}

// EventKind says what happened.
type EventKind uint8

// The events an Observer sees.
const (
	// Published: a message was handed to the broker.
	Published EventKind = iota + 1
	// Confirmed: the broker confirmed a message (ConfirmLatency and CommitLatency are set).
	Confirmed
	// ConfirmFailed: the broker nacked or returned a message, or the session died (Err).
	ConfirmFailed
	// Parked: a message was set aside as undeliverable (Reason "bad_row" or "unpublishable").
	Parked
	// SessionEnded: a session ended with Err; Retried messages in flight will be sent again.
	SessionEnded
)

// Event is one thing the relay did.
type Event struct {
	Kind EventKind
	// Seq is the message's sequence number in its session (Published, Confirmed, ConfirmFailed,
	// Parked); sessions start again from 1.
	Seq uint64
	// Message is the message (Published and Parked only), valid during the call.
	Message        *wire.Message
	EventType      string
	ConfirmLatency time.Duration // publish to broker ack
	CommitLatency  time.Duration // transaction commit to broker ack; 0 when unknown
	// PublishDelay is from the transaction's commit to the publish call's return.
	// It is set for Confirmed, when CommitLatency is known.
	// It covers the server decoding and sending the row, walbox reading it, and any wait before the publish.
	// Waits are a full window, a blocked broker, the rows before it.
	PublishDelay time.Duration
	// ReadDelay is the first part of PublishDelay.
	// It is from the commit to walbox's reader reading the row's frame from the replication connection.
	// It covers the server decoding and sending the row.
	// While the window is full, rows also wait here, unread.
	ReadDelay time.Duration
	// WriteDelay is from the commit to the publisher writing the message's last frame to the broker's socket.
	// It is set for Confirmed, when CommitLatency is known and the publisher says; else it is 0.
	// It ends after PublishDelay by any time the publisher kept the frames back.
	WriteDelay time.Duration
	Reason     string
	Retried    int
	Err        error
}

type noObserver struct{}

func (noObserver) Observe(Event) {}
