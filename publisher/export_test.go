package publisher

import "time"

// SetRecheckMissing changes how long a missing exchange stays missing, until restore.
func SetRecheckMissing(d time.Duration) (restore func()) {
	old := recheckMissing
	recheckMissing = d
	return func() { recheckMissing = old }
}
