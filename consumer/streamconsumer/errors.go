package streamconsumer

import (
	"errors"
	"fmt"

	"github.com/walbox/walbox/consumer/internal/handling"
)

// OffsetError reports a stored offset outside the stream. With Stored below First, messages
// between were never handled. With Stored past End, the offset was stored for another stream.
// That stream was deleted and declared again.
type OffsetError struct {
	Consumer, Stream string
	// Stored is the next offset the consumer stored.
	Stored int64
	// First is the offset of the stream's first message, for a stored offset below it. End is
	// the offset after its last message, for a stored offset past it. Each is -1 otherwise.
	First, End int64
	// ResetTo is where the consumer went on (Config.OffsetReset); -1 if it refused.
	ResetTo int64
}

func (e *OffsetError) Error() string {
	var where string
	if e.First >= 0 {
		where = fmt.Sprintf("below the stream's first message %d (retention removed %d messages not yet handled)",
			e.First, e.First-e.Stored)
	} else {
		where = fmt.Sprintf("past the stream's end %d (the stream was deleted and declared again?)", e.End)
	}
	head := fmt.Sprintf("stream consumer %s: stored offset %d of stream %s is %s", e.Consumer, e.Stored, e.Stream, where)
	if e.ResetTo >= 0 {
		return fmt.Sprintf("%s: reset to %d (Config.OffsetReset)", head, e.ResetTo)
	}
	return head + ": refused; set Config.OffsetReset to accept a reset, or correct next_offset in the offset table"
}

// Fatal reports whether err is one Run does not retry. It may be a stored offset outside the
// stream that Run refuses, or a dead letter the broker would drop. Or the database rejected
// the consumer's own statements as wrong: a missing privilege. These need a change of
// configuration.
func Fatal(err error) bool {
	var offset *OffsetError
	return handling.IsFatal(err) || errors.As(err, &offset) && offset.ResetTo < 0
}
