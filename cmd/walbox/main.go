// Command walbox relays the transactional outbox from PostgreSQL to RabbitMQ by change data capture.
// It is built without tracing; otel/cmd/walbox is the same command with OpenTelemetry spans.
//
//	walbox migrate   create the outbox table, its publication and the replication slot
//	walbox run       relay outbox inserts to the broker until stopped
//	walbox status    show the slot's position, lag and state
//	walbox doctor    preflight checks of PostgreSQL and RabbitMQ, with fixes
//	walbox prune     delete old outbox rows in short batches
//	walbox reshard   change the number of shards without losing a row
//	walbox recover   recover the rows of a lost slot from the outbox table, then replace the slot
//	walbox version   print the version
//
// See docs/architecture.md for the packages behind each command.
package main

import (
	"os"

	"github.com/walbox/walbox/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.Build{Version: version}))
}
