// Package republish publishes rows read from outbox tables as the relay would have published them.
// The decoder's TableRows makes each row the relay's message, with its original id. A row that can
// never be delivered is parked, with the relay's reason. The commands walbox recover and walbox
// replay use it. It moves no slot and writes nothing to the database.
//
// A Publisher counts the broker's confirms. Any failure ends it: the caller runs again. See
// docs/architecture.md for the packages around it.
package republish
