package wire

import "time"

// HeaderCommitTime carries when the message's transaction committed. It is an AMQP header, or an
// application property in a stream. Its value is RFC 3339 text in UTC, to the microsecond. The
// relay sets it from the transaction's Begin message. Consumers measure their lag from it.
const HeaderCommitTime = "x-walbox-commit-time"

// commitTimeLayout is RFC 3339 with microseconds, PostgreSQL's precision.
const commitTimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// FormatCommitTime returns the value of HeaderCommitTime for t.
func FormatCommitTime(t time.Time) string { return t.UTC().Format(commitTimeLayout) }

// ParseCommitTime reads a HeaderCommitTime value. It reports false for a missing or malformed one.
func ParseCommitTime(v any) (time.Time, bool) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

// The canary: walbox run writes a logical decoding message now and then, relays it and reads it
// back (docs/operations.md). It carries CanaryPrefix, and is published with CanaryEventType as its
// event type and routing key. It also carries the header HeaderCanary, which no producer can set.
// The consumer library acknowledges such messages without handling them.
const (
	CanaryPrefix    = "walbox.canary"
	CanaryEventType = "walbox.canary"
	HeaderCanary    = "x-walbox-canary"
)

// IsCanary reports whether a message of eventType with headers h is walbox's canary. A row of a
// producer may have the canary's event type, but never its header: it is no canary.
func IsCanary(eventType string, h map[string]any) bool {
	_, ok := h[HeaderCanary]
	return ok && eventType == CanaryEventType
}

// Canary is a canary as its reader read it back.
type Canary struct {
	Body []byte
	// CommitTime is the value of HeaderCommitTime; zero when missing.
	CommitTime time.Time
}
