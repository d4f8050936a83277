package schedule

import "time"

// SetStandbyWait sets how long a record waits for synchronized_standby_slots, until undo.
func SetStandbyWait(d time.Duration) (undo func()) {
	old := standbyWait
	standbyWait = d
	return func() { standbyWait = old }
}

// PipelineLockWait is how long a batch read beside another waits for a table lock.
const PipelineLockWait = pipelineLockWait

// MigratedDB is migratedDB, for the tests outside the package.
var MigratedDB = migratedDB
