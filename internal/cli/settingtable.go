package cli

//go:generate go test -run TestConfigurationDoc -update .

import (
	"slices"
	"strconv"
	"strings"

	"github.com/walbox/walbox/canary"
	"github.com/walbox/walbox/internal/prune"
	"github.com/walbox/walbox/internal/relayd"
	"github.com/walbox/walbox/internal/replay"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/streampub"
)

// spec declares one setting of one or more commands. The flags, the environment variables, the
// config file's keys, --help and docs/configuration.md all come from settingTable.
type spec struct {
	flag     string   // the flag's name, and the setting's key in the config file
	env      string   // its environment variable ("" for none); NAME_FILE names a file holding it
	def      string   // its default ("" for none)
	unset    string   // what leaving it empty means, where it has no default (markdown)
	required bool     // the command fails without it
	isBool   bool     // a switch: --name alone means true
	cmds     []string // the commands that take it
	help     string   // what it does (markdown: --help drops the backquotes)
	see      string   // a docs page with more, linked from docs/configuration.md only

	// bind returns the typed field the setting sets (see decode). An empty value of a setting
	// without a default leaves the field as it is.
	bind func(*values) any
	// unless names the settings that make a required one optional, when set (switched on).
	unless []string
	// idle reports whether the command leaves this setting unused, given the others. An idle
	// setting is not decoded: a value it would refuse is ignored, as the command ignores it.
	idle func(*settings) bool
	// need says what a required setting is for, after "required: " ("" for nothing).
	need string
	// with names the setting this one works only with. Without it, this one is not decoded,
	// and the command refuses any value but its default.
	with string
}

// group is a section of docs/configuration.md.
type group struct {
	title string
	specs []spec
}

var (
	allCommands = []string{"migrate", "run", "status", "doctor", "prune", "reshard", "recover", "parked", "replay"}
	dialers     = []string{"run", "doctor", "recover", "parked", "replay"} // the commands that dial the broker as run does
)

// settingTable is every setting of every command. A flag may have a row per command when its
// meaning or environment variable differs. Rows of one flag share its default.
var settingTable = []group{
	{"Connections", []spec{
		{flag: "config", env: "WALBOX_CONFIG", cmds: allCommands, bind: func(v *values) any { return &v.config },
			help: "YAML file of settings by flag name, and of the outbox tables; flags and environment win over it", see: "#the-config-file"},
		{flag: "database-url", env: "WALBOX_DATABASE_URL", required: true, cmds: allCommands, bind: func(v *values) any { return &v.relay.DatabaseURL },
			help: "PostgreSQL URL or keyword string; the role needs `LOGIN REPLICATION`"},
		{flag: "database-password", env: "WALBOX_DATABASE_PASSWORD", cmds: allCommands, bind: func(v *values) any { return &v.dbPassword },
			help: "password for the database URL's user, kept out of the URL (prefer the `_FILE` form)"},
		{flag: "replication-url", env: "WALBOX_REPLICATION_URL", unset: "stream from `--database-url`",
			cmds: []string{"migrate", "run", "status", "doctor", "recover", "reshard"}, bind: func(v *values) any { return &v.relay.ReplicationURL },
			help: "a hot standby of `--database-url`'s server (PostgreSQL 16+) to decode on: its slot is streamed from (and created there), " +
				"while the record and the checks stay on `--database-url`, the primary",
			see: "ha.md#postgresql-16-decoding-on-a-standby"},
		{flag: "amqp-url", env: "WALBOX_AMQP_URL", required: true, cmds: dialers, bind: func(v *values) any { return (*urlList)(&v.amqpURLs) }, unless: noBroker, idle: withoutBroker,
			help: "RabbitMQ URL, `amqp://` or `amqps://`; several, comma-separated, for the nodes of a cluster: " +
				"walbox connects to the first that answers and moves on to the next when the connection is lost " +
				"(`recover --dry-run`, and `run` and `recover` with `--stream-url`, need none)", see: "setup.md#a-rabbitmq-cluster"},
		{flag: "amqp-password", env: "WALBOX_AMQP_PASSWORD", cmds: dialers, bind: func(v *values) any { return &v.amqpPassword },
			help: "password for the AMQP URL's user, kept out of the URL; it goes into every URL of a cluster (prefer the `_FILE` form)"},
		{flag: "amqp-ca-file", env: "WALBOX_AMQP_CA_FILE", unset: "system roots", cmds: dialers, bind: func(v *values) any { return &v.caFile },
			help: "PEM CA bundle to verify the broker's certificate (amqps)"},
		{flag: "amqp-cert-file", env: "WALBOX_AMQP_CERT_FILE", cmds: dialers, bind: func(v *values) any { return &v.certFile }, help: "PEM client certificate for amqps"},
		{flag: "amqp-key-file", env: "WALBOX_AMQP_KEY_FILE", cmds: dialers, bind: func(v *values) any { return &v.keyFile }, help: "PEM key of the client certificate"},
	}},
	{"What to relay", []spec{
		{flag: "slot", env: "WALBOX_SLOT", def: replication.DefaultSlot, cmds: allCommands, bind: func(v *values) any { return &v.relay.Slot }, help: "logical replication slot (pgoutput)"},
		{flag: "failover-slot", env: "WALBOX_FAILOVER_SLOT", def: string(replication.DefaultFailoverSlot), cmds: []string{"migrate", "run", "doctor", "recover", "reshard"}, bind: func(v *values) any { return &v.relay.FailoverSlot },
			help: "make the slots walbox creates failover slots, which a standby with `sync_replication_slots` keeps for a promotion: " +
				"`auto` (PostgreSQL 17 and later), `on` (refused before 17) or `off`",
			see: "ha.md#postgresql-17-failover-slots-recommended"},
		{flag: "publication", env: "WALBOX_PUBLICATION", def: replication.DefaultPublication, cmds: allCommands, bind: func(v *values) any { return &v.relay.Publication }, help: "publication that contains the outbox table"},
		{flag: "table", env: "WALBOX_TABLE", def: outbox.DefaultTable.String(), cmds: allCommands, bind: func(v *values) any { return &v.relay.Table }, help: "outbox table, `schema.name`; its schema holds walbox's record of its slots, the one `walbox migrate` created"},
		{flag: "message-prefix", env: "WALBOX_MESSAGE_PREFIX", def: outbox.DefaultMessagePrefix, cmds: allCommands, bind: func(v *values) any { return &v.relay.MessagePrefix },
			help: "prefix of the logical decoding messages `walbox_emit` writes, relayed like rows (PostgreSQL 14+); `none` relays none"},
	}},
	{"Where messages go", []spec{
		{flag: "exchange", env: "WALBOX_EXCHANGE", def: publisher.DefaultExchange, cmds: dialers, bind: func(v *values) any { return &v.pub.Exchange }, help: "topic exchange to publish to (declared durable)"},
		{flag: "alternate-exchange", env: "WALBOX_ALTERNATE_EXCHANGE", unset: "`<exchange>.unroutable`", cmds: dialers, bind: func(v *values) any { return &v.pub.AlternateExchange },
			help: "exchange that keeps messages no queue is bound for; `none`: such a message stalls the stream until a queue is bound"},
		{flag: "park-exchange", env: "WALBOX_PARK_EXCHANGE", unset: "`<exchange>.parked`", cmds: dialers, bind: func(v *values) any { return &v.pub.ParkExchange },
			help: "exchange for rows that can never be delivered"},
		{flag: "queue-type", env: "WALBOX_QUEUE_TYPE", def: publisher.DefaultQueueType, cmds: dialers, bind: func(v *values) any { return &v.pub.QueueType },
			help: "type of the park and alternate queues walbox declares: `auto`, `classic` or `quorum`; " +
				"auto is quorum with several --amqp-url nodes, else classic, and keeps an existing queue as it is " +
				"(one URL in front of a cluster needs quorum: a classic queue is unavailable while its node is down)",
			see: "setup.md#a-rabbitmq-cluster"},
		{flag: "max-message-size", env: "WALBOX_MAX_MESSAGE_SIZE", def: strconv.Itoa(publisher.DefaultMaxMessageSize), cmds: dialers, bind: func(v *values) any { return &v.pub.MaxMessageSize }, idle: withoutBroker,
			help: "largest message body in bytes (the default is 16 MiB); larger rows are parked " +
				"(keep at or below the broker's `max_message_size`)"},
		{flag: "window", env: "WALBOX_WINDOW", def: strconv.Itoa(replication.DefaultWindow), cmds: dialers, bind: func(v *values) any { return &v.relay.Window }, idle: withoutWindow, help: "most messages published and not yet confirmed"},
	}},
	{"Relaying: walbox run", []spec{
		{flag: "lanes", env: "WALBOX_LANES", def: strconv.Itoa(relayd.DefaultLanes), cmds: runOnly, bind: func(v *values) any { return &v.daemon.Lanes },
			help: "publish over this many channels, each on its own connection, by a hash of the aggregate id: " +
				"each aggregate's messages keep their commit order, different aggregates' need not (1: commit order)",
			see: "setup.md#publishing-lanes"},
		{flag: "status-interval", env: "WALBOX_STATUS_INTERVAL", def: replication.DefaultStatusInterval.String(), cmds: runOnly, bind: func(v *values) any { return &v.relay.StatusInterval },
			help: "how often the confirmed position is reported to PostgreSQL; sooner once the stream goes quiet or " +
				"half the window was confirmed since the last report; at most a quarter of `wal_sender_timeout` apart (60 s)"},
		{flag: "canary-interval", env: "WALBOX_CANARY_INTERVAL", def: canary.DefaultInterval.String(), cmds: runOnly, bind: func(v *values) any { return (*pause)(&v.daemon.Canary) },
			help: "how often the active instance writes a canary through the database and reads it back from its queue; " +
				"`/readyz` fails when none came back for two intervals (0: off, else at least 100ms; in stream mode it is read from the stream)",
			see: "operations.md#the-canary"},
		{flag: "shutdown-timeout", env: "WALBOX_SHUTDOWN_TIMEOUT", def: replication.DefaultShutdownTimeout.String(), cmds: runOnly, bind: func(v *values) any { return &v.relay.ShutdownTimeout },
			help: "how long a shutdown waits for outstanding confirms"},
		{flag: "create-slot", env: "WALBOX_CREATE_SLOT", def: strconv.FormatBool(replication.DefaultCreateSlot), isBool: true, cmds: runOnly, bind: func(v *values) any { return &v.relay.CreateSlot },
			help: "create the slot at start if it does not exist, with a warning (rows committed before that are not covered)"},
		{flag: "wait-for-servers", env: "WALBOX_WAIT_FOR_SERVERS", def: "false", isBool: true, cmds: runOnly, bind: func(v *values) any { return &v.relay.WaitForServers },
			help: "keep retrying when PostgreSQL or RabbitMQ cannot be reached at start, instead of exiting"},
		{flag: "listen", env: "WALBOX_LISTEN", def: relayd.DefaultListen, cmds: runOnly, bind: func(v *values) any { return (*listenAddr)(&v.daemon.Listen) },
			help: "address for `/metrics`, `/healthz`, `/readyz` and `/status` (`off` disables them)", see: "operations.md#metrics-health-and-status"},
		{flag: "otlp-endpoint", env: "WALBOX_OTLP_ENDPOINT", unset: "no tracing", cmds: runOnly, bind: func(v *values) any { return &v.otlp },
			help: "OTLP/HTTP URL (`http://collector:4318`) to export a span per publish to; " +
				"only a walbox built with tracing (`make build TAGS=otel`) takes it, others refuse it at start", see: "operations.md#tracing"},
		{flag: "log-level", env: "WALBOX_LOG_LEVEL", def: defaultLogLevel, cmds: runOnly, bind: func(v *values) any { return &v.logLevel }, help: "`debug`, `info`, `warn` or `error`"},
		{flag: "log-format", env: "WALBOX_LOG_FORMAT", def: defaultLogFormat, cmds: runOnly, bind: func(v *values) any { return &v.logFormat },
			help: "`json`, `text`, or `auto` (text on a terminal, JSON otherwise)"},
		{flag: "shards", env: "WALBOX_SHARDS", unset: "read from the publications", cmds: runOnly, bind: func(v *values) any { return (*shardCount)(&v.shards) },
			help: "the number of shards `walbox migrate --shards` created", see: "scaling.md"},
		{flag: "shard", env: "WALBOX_SHARD", unset: "the single slot", cmds: runOnly, bind: func(v *values) any { return (*shardIndex)(&v.shard) },
			help: "stream this shard (0 to N-1) of the sharded outbox table, from its own slot", see: "scaling.md"},
		{flag: "stream-url", env: "WALBOX_STREAM_URL", unset: "publish to the exchange", cmds: streamCmds, bind: func(v *values) any { return (*streamURIs)(&v.stream.URIs) },
			help: "RabbitMQ stream URL, `rabbitmq-stream://`; several, comma-separated, for the nodes of a cluster. " +
				"With it walbox publishes into `--stream`, exactly once, instead of to the exchange", see: "streams.md"},
		{flag: "stream", env: "WALBOX_STREAM", def: streampub.DefaultStream, cmds: streamCmds, bind: func(v *values) any { return &v.stream.Stream },
			help: "the stream to publish into (declared if missing)", see: "streams.md"},
		{flag: "stream-max-age", env: "WALBOX_STREAM_MAX_AGE", unset: "no limit", cmds: runOnly, bind: func(v *values) any { return &v.stream.MaxAge }, with: "stream-url",
			help: "retention of a stream walbox declares: drop messages older than this, such as `168h`"},
		{flag: "stream-max-bytes", env: "WALBOX_STREAM_MAX_BYTES", unset: "no limit", cmds: runOnly, bind: func(v *values) any { return (*byteCount)(&v.stream.MaxBytes) }, with: "stream-url",
			help: "retention of a stream walbox declares: keep at most this many bytes"},
	}},
	{"Migrating: walbox migrate", []spec{
		{flag: "no-slot", env: "WALBOX_MIGRATE_NO_SLOT", def: "false", isBool: true, cmds: []string{"migrate"}, bind: func(v *values) any { return &v.noSlot },
			help: "do not create the replication slot (for a role without `REPLICATION`; `walbox run` creates it later)"},
		{flag: "shards", env: "WALBOX_SHARDS", unset: "one slot", cmds: []string{"migrate"}, bind: func(v *values) any { return (*shardCount)(&v.shards) },
			help: "split the outbox table into this many shards: a publication with a row filter and a slot per shard", see: "scaling.md"},
		{flag: "relay-role", env: "WALBOX_RELAY_ROLE", unset: "none: roles granted before keep it", cmds: []string{"migrate"}, bind: func(v *values) any { return &v.relayRole },
			help: "the role `walbox run` logs in as, when it is not the one running migrate: " +
				"the one role besides the owner that may execute the record functions, which move walbox's record of its slots; " +
				"migrate records it in walbox_relay_roles for doctor",
			see: "security.md"},
	}},
	{"Status and doctor", []spec{
		{flag: "json", def: "false", isBool: true, cmds: []string{"status", "doctor"}, bind: func(v *values) any { return &v.json }, help: "print JSON for scripts"},
		{flag: "relay-role", env: "WALBOX_RELAY_ROLE", unset: "the database URL's role", cmds: []string{"doctor"}, bind: func(v *values) any { return &v.relayRole },
			help: "the role `walbox run` logs in as, when doctor runs as another role: doctor checks that it may execute the record functions", see: "security.md"},
		{flag: "relay-url", env: "WALBOX_RELAY_URL", def: "http://" + relayd.DefaultListen, cmds: []string{"status"}, bind: func(v *values) any { return (*relayURL)(&v.relayURL) },
			help: "the running relay's HTTP address, for its state and last error (`off` to skip)"},
		{flag: "require-relay", def: "false", isBool: true, cmds: []string{"status"}, bind: func(v *values) any { return &v.requireRelay },
			help: "exit 1 unless the relay answers and is streaming or a standby (for container health checks)"},
	}},
	{"Pruning: walbox prune", []spec{
		{flag: "older-than", env: "WALBOX_PRUNE_OLDER_THAN", required: true, cmds: []string{"prune"}, bind: func(v *values) any { return (*age)(&v.prune.OlderThan) },
			help: "delete rows created longer ago than this, e.g. `168h` or `7d`"},
		{flag: "batch-size", env: "WALBOX_PRUNE_BATCH_SIZE", def: strconv.Itoa(prune.DefaultBatchSize), cmds: []string{"prune"}, bind: func(v *values) any { return &v.prune.BatchSize }, help: "rows deleted per transaction"},
		{flag: "pause", env: "WALBOX_PRUNE_PAUSE", def: prune.DefaultPause.String(), cmds: []string{"prune"}, bind: func(v *values) any { return (*pause)(&v.prune.Pause) }, help: "sleep between batches, to spread the load"},
		{flag: "dry-run", env: "WALBOX_PRUNE_DRY_RUN", def: "false", isBool: true, cmds: []string{"prune"}, bind: func(v *values) any { return &v.prune.DryRun },
			help: "count the rows that would be deleted, delete nothing"},
	}},
	{"Recovering: walbox recover", []spec{
		{flag: "dry-run", def: "false", isBool: true, cmds: []string{"recover"}, bind: func(v *values) any { return &v.dryRun },
			help: "show the gap and count the rows that would be republished (counted now: an upper bound); change nothing"},
		{flag: "all-rows", def: "false", isBool: true, cmds: []string{"recover"}, bind: func(v *values) any { return &v.recover.AllRows },
			help: "republish every row of the outbox tables, where the record holds no transaction horizon to tell the gap's rows by"},
		{flag: "accept-loss", def: "false", isBool: true, cmds: []string{"recover"}, bind: func(v *values) any { return &v.recover.AcceptLoss },
			help: "recreate the slot and reset the record although rows of the gap may be gone: the outbox tables are empty, " +
				"or the server's statistics count deletes walbox prune did not make (producers that delete rows as they insert them, " +
				"a `DELETE` by hand); republishes the rows that are left", see: "operations.md#slot-lost"},
		{flag: "force", def: "false", isBool: true, cmds: []string{"recover"}, bind: func(v *values) any { return &v.recover.Force },
			help: "recover although the slot continues from the record: for rows the publication did not cover " +
				"(a table swapped in, the publication dropped or altered) or the slot cannot decode (a column renamed and renamed back); " +
				"a stop walbox run recorded needs no --force, but takes it"},
	}},
	{"Parked messages: walbox parked", []spec{
		{flag: "all", def: "false", isBool: true, cmds: []string{"parked"}, bind: func(v *values) any { return &v.parkedAll },
			help: "replay or discard every parked message, instead of the ids given", see: "operations.md#parked-messages"},
		{flag: "yes", def: "false", isBool: true, cmds: []string{"parked"}, bind: func(v *values) any { return &v.yes },
			help: "confirm a discard: the messages are gone for good"},
	}},
	{"Replaying: walbox replay", []spec{
		{flag: "since", env: "WALBOX_REPLAY_SINCE", unset: "no lower bound", cmds: replayOnly, bind: func(v *values) any { return (*instant)(&v.replay.Filter.Since) },
			help: "replay rows of this time or later: RFC 3339 (`2026-11-28T09:00:00Z`) or a date (`2026-11-28`, UTC); " +
				"the time is the commit time where the server tracks it (`track_commit_timestamp`), else the `created_at` column",
			see: "operations.md#replaying-rows"},
		{flag: "until", env: "WALBOX_REPLAY_UNTIL", unset: "no upper bound", cmds: replayOnly, bind: func(v *values) any { return (*instant)(&v.replay.Filter.Until) },
			help: "replay rows of times before this one, as `--since` takes it"},
		{flag: "aggregate-type", env: "WALBOX_REPLAY_AGGREGATE_TYPE", unset: "every type", cmds: replayOnly, bind: func(v *values) any { return &v.replay.Filter.AggregateType },
			help: "replay only rows of this aggregate type"},
		{flag: "aggregate-id", env: "WALBOX_REPLAY_AGGREGATE_ID", unset: "every aggregate", cmds: replayOnly, bind: func(v *values) any { return &v.replay.Filter.AggregateID },
			help: "replay only rows of this aggregate id"},
		{flag: "event-type", env: "WALBOX_REPLAY_EVENT_TYPE", unset: "every event type", cmds: replayOnly, bind: func(v *values) any { return &v.replay.Filter.EventType },
			help: "replay only rows of this event type"},
		{flag: "rate", env: "WALBOX_REPLAY_RATE", def: strconv.Itoa(replay.DefaultRate), cmds: replayOnly, bind: func(v *values) any { return (*rate)(&v.replay.Rate) },
			help: "publish at most this many messages a second (`0`: no limit), to leave the relay's consumers room"},
	}},
	{"Resharding: walbox reshard", []spec{
		{flag: "shards", env: "WALBOX_SHARDS", required: true, cmds: []string{"reshard"}, bind: func(v *values) any { return (*shardCount)(&v.shards) }, need: "the number of shards to move to",
			help: "the number of shards to move to (1: back to a single slot)", see: "scaling.md#changing-the-number-of-shards"},
		{flag: "wait", unset: "no wait", cmds: []string{"reshard"}, bind: func(v *values) any { return &v.reshard.Wait },
			help: "after creating the new set, wait up to this long (e.g. `10m`) until every old slot passed the cut"},
		{flag: "retire", def: "false", isBool: true, cmds: []string{"reshard"}, bind: func(v *values) any { return &v.retire },
			help: "drop the old set's slots and publications; refused unless each old slot passed the cut and is not streaming"},
	}},
}

var (
	runOnly    = []string{"run"}
	replayOnly = []string{"replay"}
)

// noBroker are the settings that, on, leave the exchange alone: a stream takes the messages, or
// recover --dry-run publishes nothing.
var noBroker = []string{"stream-url", "dry-run"}

// withoutBroker reports whether the command dials no broker over AMQP.
func withoutBroker(s *settings) bool { return s.anyOn(noBroker) }

// withoutWindow reports whether the command publishes nothing. Run into a stream keeps its
// window; doctor and recover use it only with the exchange.
func withoutWindow(s *settings) bool {
	return s.anyOn([]string{"dry-run"}) || s.cmd != "run" && s.anyOn([]string{"stream-url"})
}

// streamCmds take the stream mode's connection. Run publishes into the stream, and doctor and status
// check it. Recover publishes a lost slot's gap into it, and parked reads its park stream. Replay
// refuses it.
var streamCmds = []string{"run", "status", "doctor", "recover", "parked", "replay"}

// specsOf returns the rows of settingTable that cmd takes, in the table's order.
func specsOf(cmd string) []spec {
	var out []spec
	for _, g := range settingTable {
		for _, sp := range g.specs {
			if slices.Contains(sp.cmds, cmd) {
				out = append(out, sp)
			}
		}
	}
	return out
}

// fileKeys returns the keys the config file takes: every setting but --config itself, sorted.
func fileKeys() []string {
	var keys []string
	for _, g := range settingTable {
		for _, sp := range g.specs {
			if sp.flag != "config" && !slices.Contains(keys, sp.flag) {
				keys = append(keys, sp.flag)
			}
		}
	}
	slices.Sort(keys)
	return keys
}

// usage is the setting's line in --help: its description, what empty means, its environment
// variables and its default.
func (sp spec) usage() string {
	u := plain(sp.help)
	switch {
	case sp.required:
		u += " (required)"
	case sp.unset != "":
		u += " (default: " + plain(sp.unset) + ")"
	}
	if sp.env != "" {
		u += " (env " + sp.env + " or " + sp.env + "_FILE)"
	}
	return u + defaultNote(sp.def)
}

// plain drops markdown's backquotes, which the flag package would read as the name of the value.
func plain(s string) string { return strings.ReplaceAll(s, "`", "") }
