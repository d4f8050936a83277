// Package cli is the walbox command: its subcommands, settings, printing and exit codes. Two main
// packages run it. The one in cmd/walbox is built without tracing. The one in otel/cmd/walbox
// passes the OTLP tracer. It is a module of its own, so OpenTelemetry stays out of the product's
// go.mod.
//
//	walbox migrate   create the outbox table, its publication and the replication slot
//	walbox run       relay outbox inserts to the broker until stopped
//	walbox status    show the slot's position, lag and state
//	walbox doctor    preflight checks of PostgreSQL and RabbitMQ, with fixes
//	walbox prune     delete old outbox rows in short batches
//	walbox reshard   change the number of shards without losing a row
//	walbox recover   recover the rows of a lost slot from the outbox table, then replace the slot
//	walbox parked    list, show, replay or discard the messages walbox parked
//	walbox replay    republish chosen outbox rows, with their ids, beside a running relay
//	walbox version   print the version
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/walbox/walbox/internal/redact"
)

// Build says what the main package compiled in.
type Build struct {
	// Version is the walbox's version, set at build time in the main package with
	// -ldflags "-X main.version=..."; empty is "dev".
	Version string
	// Tracer exports spans for --otlp-endpoint; nil, the default build, refuses the setting.
	Tracer Tracer
}

// build is the one Main runs with; tests that call mainWithExit get the default build.
var build = Build{Version: "dev"}

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"migrate", "create the outbox table, its publication and the replication slot", runMigrate},
	{"run", "relay outbox inserts to RabbitMQ until stopped", runRelay},
	{"status", "show the replication slot's position, lag and state", runStatus},
	{"doctor", "check PostgreSQL and RabbitMQ are ready for walbox, with the fix for each failure", runDoctor},
	{"prune", "delete outbox rows older than a duration, in short batches", runPrune},
	{"reshard", "change the number of shards: create the new set of slots, retire the old one once it passed the cut", runReshard},
	{"recover", "after a slot was lost, republish the rows of the gap from the outbox table and replace the slot", runRecover},
	{"parked", "list, show, replay or discard the messages walbox parked", runParked},
	{"replay", "republish outbox rows chosen by time, aggregate or event type, with their ids, beside a running relay", runReplay},
	{"version", "print the version", runVersion},
}

// Main runs the command line args (without the program's name) with the build b and returns the
// process exit code.
func Main(args []string, b Build) int {
	if b.Version == "" {
		b.Version = "dev"
	}
	build = b
	return mainWithExit(context.Background(), args, os.Stdout, os.Stderr)
}

// mainWithExit runs one command and returns the process exit code. It is 0 on success, 1 on a
// failure, 2 on a bad command line or setting.
func mainWithExit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := explainAuth(c.run(ctx, args[1:], stdout, stderr))
		var ce configError
		switch {
		case err == nil, errors.Is(err, errHelp):
			return 0
		case errors.As(err, &ce):
			fmt.Fprintf(stderr, "walbox %s: %s\n", c.name, redact.Text(err.Error(), envSecrets()...))
			return 2
		default:
			fmt.Fprintf(stderr, "walbox %s: %s\n", c.name, redact.Text(err.Error(), envSecrets()...))
			return 1
		}
	}
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	fmt.Fprintf(stderr, "walbox: unknown command %q%s (walbox --help lists the commands)\n", args[0], didYouMean(args[0], names, "%q"))
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "walbox relays the transactional outbox from PostgreSQL to RabbitMQ by change data capture.")
	fmt.Fprintln(w, "\nUsage: walbox <command> [flags]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'walbox <command> --help' for the command's settings.")
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "print the version", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	kind := "built without tracing"
	if build.Tracer != nil {
		kind = "built with tracing (otel)"
	}
	fmt.Fprintf(stdout, "walbox %s, %s\n", build.Version, kind)
	return nil
}

// envSecrets lists passwords from the environment's connection settings. No error or log line
// repeats them then, even where a library quoted a connection string.
func envSecrets() []string {
	var conns, raw []string
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case !strings.HasPrefix(k, "WALBOX_"):
		case strings.HasSuffix(k, "_URL"):
			conns = append(conns, v)
		case strings.HasSuffix(k, "_PASSWORD") && v != "":
			raw = append(raw, v)
		}
	}
	return append(redact.Secrets(conns...), raw...)
}
