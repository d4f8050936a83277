package cli

import "github.com/walbox/walbox/replication"

// relayedPrefix returns the prefix the relay asks for, "" for none.
func relayedPrefix(setting string) string {
	if setting == replication.NoMessages {
		return ""
	}
	return setting
}
