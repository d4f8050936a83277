package streampub

import (
	"fmt"

	"github.com/walbox/walbox/wire"
)

// foreignAnchorError means that the producer's last message carries another database system's
// identifier. Another writer used a name derived from this system's. Numbering on from it could
// give this system's rows ids the broker already stored for the other's.
type foreignAnchorError struct {
	Stream, Producer string
	// System is this session's database system identifier, Found the message's ("" for none).
	System, Found string
}

func (e *foreignAnchorError) Error() string {
	found := e.Found
	if found == "" {
		found = "none"
	}
	return fmt.Sprintf("stream %s: the last message of producer %s names database system %s, but this server is system %s: "+
		"another writer uses this relay's producer name; stop it, or publish into another stream", e.Stream, e.Producer, found, e.System)
}

// Unwrap makes the error wire.ErrConflict: the relay stops on it.
func (e *foreignAnchorError) Unwrap() error { return wire.ErrConflict }
