package streamconsumer

import (
	"errors"
	"fmt"
	"time"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/consumer/internal/handling"
	"github.com/walbox/walbox/wire"
)

// DefaultOffsetTable is the table where a Consumer keeps its next offset.
const DefaultOffsetTable = "walbox_stream_offsets"

// OffsetReset says where a Consumer starts when its stored offset lies outside the stream.
type OffsetReset int

const (
	// RefuseReset (the zero value) refuses to start: Run reports an *OffsetError to OnError
	// and returns it.
	RefuseReset OffsetReset = iota
	// ResetToFirst starts at the first message the stream still holds.
	ResetToFirst
	// ResetToEnd starts after the last message the stream holds: only messages published
	// later are handled.
	ResetToEnd
)

// Config configures a Consumer.
type Config struct {
	// URIs are the nodes' rabbitmq-stream:// URIs; the client connects to the first that
	// answers. Required.
	URIs []string
	// Stream is the stream to read. Required.
	Stream string
	// ConsumerName names the consumer: its row in OffsetTable. Required.
	ConsumerName string
	// OffsetTable keeps the next offset of each consumer and stream (default
	// DefaultOffsetTable). Run creates it if it is missing.
	OffsetTable string
	// MaxAttempts is how often a message is tried before it is dead-lettered (default
	// consumer.DefaultMaxAttempts).
	MaxAttempts int
	// RetryBackoff and RetryBackoffMax bound the pause before each retry: it starts at
	// RetryBackoff and doubles (defaults consumer.DefaultRetryBackoff and
	// consumer.DefaultRetryBackoffMax).
	RetryBackoff, RetryBackoffMax time.Duration
	// DeadLetterStream keeps the messages that failed MaxAttempts times (default
	// "<Stream>.dead"), declared if missing.
	DeadLetterStream string
	// ReconnectBackoff is the pause before reading again after a connection or database error
	// (default consumer.DefaultReconnectBackoff).
	ReconnectBackoff time.Duration
	// OffsetReset says what Run does when the stored offset lies outside the stream. Below its
	// first message, retention removed messages not yet handled. Past its end, the stream was
	// deleted and declared again. The default, RefuseReset, stops Run.
	OffsetReset OffsetReset
	// OnError receives the errors Run recovers from, and an offset reset it made. It receives an
	// *OffsetError before Run returns it. The default is none.
	OnError func(error)
	// Metrics, if set, is told what became of each message (see consumer.Metrics). Default none.
	Metrics consumer.Metrics
}

// noMetrics is the default Metrics.
type noMetrics struct{}

func (noMetrics) Handled(string, consumer.Delivery) {}
func (noMetrics) Failed(string, consumer.Delivery)  {}

// Validate reports the first bad setting of c. A zero field stands for its default, as in New.
// Validate changes nothing.
func (c Config) Validate() error {
	c = c.withDefaults()
	if len(c.URIs) == 0 || c.Stream == "" || c.ConsumerName == "" {
		return errors.New("stream consumer: uris, stream and consumer name are required")
	}
	if c.OffsetReset < RefuseReset || c.OffsetReset > ResetToEnd {
		return fmt.Errorf("stream consumer: offset reset %d: want RefuseReset, ResetToFirst or ResetToEnd", c.OffsetReset)
	}
	if _, err := wire.ParseTable(c.OffsetTable); err != nil {
		return fmt.Errorf("offset table: %w", err)
	}
	// The queue consumer's Validate words these the same.
	switch {
	case c.MaxAttempts < 0:
		return fmt.Errorf("max attempts %d: negative", c.MaxAttempts)
	case c.RetryBackoff < 0:
		return fmt.Errorf("retry backoff %s: negative", c.RetryBackoff)
	case c.ReconnectBackoff < 0:
		return fmt.Errorf("reconnect backoff %s: negative", c.ReconnectBackoff)
	}
	return nil
}

// withDefaults returns c with each zero field set to its default.
func (c Config) withDefaults() Config {
	handling.SetDefault(&c.OffsetTable, DefaultOffsetTable)
	handling.SetDefault(&c.MaxAttempts, consumer.DefaultMaxAttempts)
	handling.SetDefault(&c.RetryBackoff, consumer.DefaultRetryBackoff)
	handling.SetDefault(&c.RetryBackoffMax, max(consumer.DefaultRetryBackoffMax, c.RetryBackoff))
	handling.SetDefault(&c.DeadLetterStream, c.Stream+".dead")
	handling.SetDefault(&c.ReconnectBackoff, consumer.DefaultReconnectBackoff)
	if c.OnError == nil {
		c.OnError = func(error) {}
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	return c
}

// retryDelay is the pause after failed attempt number attempt (1-based). Unlike the queue
// consumer's, it is not cut to whole milliseconds: no queue name carries it.
func (c Config) retryDelay(attempt int) time.Duration {
	return handling.RetryDelay(c.RetryBackoff, c.RetryBackoffMax, attempt)
}
