package bench

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/walbox/walbox/outbox"
)

// traceparent is the one header every message carries, as a W3C trace context would.
const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// headersJSON is the headers column of every row.
const headersJSON = `{"traceparent": "` + traceparent + `"}`

// padSource is incompressible text that payloads are padded with, so that large payloads are
// not shrunk by TOAST compression into something no real event looks like.
var padSource = func() string {
	r := rand.New(rand.NewChaCha8([32]byte{'w', 'a', 'l', 'b', 'o', 'x'}))
	raw := make([]byte, 48<<10)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	return base64.RawStdEncoding.EncodeToString(raw)
}()

// payload returns the JSON body of message seq, about size bytes long, exactly as jsonb prints it
// (keys ordered by length, then bytewise; ": " and ", " between), so the broker gets the same
// bytes on every path. ts is a time in Unix nanoseconds: the ceiling's send time, or the time the
// producer built a row.
func payload(seq int, ts int64, size int) string {
	head, tail := payloadEnds(seq, ts)
	return head + pad(seq, size-len(head)-len(tail)) + tail
}

// payloadEnds returns what comes before and after the padding in the body of message seq.
func payloadEnds(seq int, ts int64) (head, tail string) {
	return `{"ts": ` + strconv.FormatInt(ts, 10) + `, "pad": "`, `", "seq": ` + strconv.Itoa(seq) + `}`
}

// pad returns message seq's padding of n bytes (none if n is negative), taken from padSource at
// an offset that depends on seq.
func pad(seq, n int) string {
	n = min(max(n, 0), len(padSource)/2)
	off := (seq * 7919) % (len(padSource) - n)
	return padSource[off : off+n]
}

// Keys read back from a delivered body.
var (
	keySeq = []byte(`"seq": `)
	keyTS  = []byte(`"ts": `)
)

// field reads the integer after key in body.
func field(body, key []byte) (int64, bool) {
	i := bytes.Index(body, key)
	if i < 0 {
		return 0, false
	}
	var v int64
	n := 0
	for _, c := range body[i+len(key):] {
		if c < '0' || c > '9' {
			break
		}
		v = v*10 + int64(c-'0')
		n++
	}
	return v, n > 0
}

// message returns the outbox message of seq, as the ceiling publishes it.
func message(seq int, size int, now time.Time) *outbox.Message {
	return &outbox.Message{
		ID:            uuid.New(),
		AggregateType: "order",
		AggregateID:   strconv.Itoa(seq % 1000),
		EventType:     "order.created",
		Payload:       []byte(payload(seq, now.UnixNano(), size)),
		Headers:       map[string]any{"traceparent": traceparent},
		CreatedAt:     now,
	}
}
