package faults_test

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// seamDimensions are the modes the seam matrix varies (docs/seams.md). A mode added to walbox
// is a value here, or an exclusion in seamNotModes with the test that covers it instead.
var seamDimensions = []dimension{
	{"publisher", []string{"amqp", "stream"}},
	{"source", []string{"table", "emit", "mapped", "position"}},
	{"slots", []string{"one", "shards", "lanes"}},
	{"relays", []string{"one", "standby"}},
	{"broker", []string{"one", "cluster"}},
	{"fault", []string{"killpoint", "broker-kill", "pg-restart", "failover", "slot-lost", "prune-outage", "reshard", "restore"}},
}

// seamRefusals are the pairs walbox refuses to run together, and how.
var seamRefusals = []refusal{
	{a: "source=position", b: "slots=shards", cmd: "migrate", code: 2, msg: "position ids with a row filter"},
	{a: "publisher=stream", b: "slots=lanes", cmd: "run", code: 2, msg: "a stream takes one producer, in commit order"},
	{a: "source=position", b: "fault=slot-lost", cmd: "recover", code: 1, msg: "recover refuses rather than publish it under a new id"},
	{a: "source=position", b: "fault=reshard", cmd: "reshard", code: 2, msg: "position ids with a row filter"},
	{a: "source=mapped", b: "slots=shards", cmd: "migrate", code: 2, msg: "but a set of shards splits public.outbox alone"},
	{a: "source=mapped", b: "fault=reshard", cmd: "reshard", code: 1, msg: "but a set of shards splits public.outbox alone"},
}

// seamModeFlags maps each setting that selects a mode to the dimension whose values cover it.
var seamModeFlags = map[string]string{
	"config":           "source",    // the tables of the config file: mapped, position ids
	"table":            "source",    // the outbox table
	"message-prefix":   "source",    // walbox_emit
	"stream-url":       "publisher", // stream
	"stream":           "publisher",
	"stream-max-age":   "publisher",
	"stream-max-bytes": "publisher",
	"lanes":            "slots",
	"shards":           "slots",
	"shard":            "slots",
	"amqp-url":         "broker", // several URLs: a cluster
	"queue-type":       "broker", // auto: classic on one broker, quorum on a cluster
	"failover-slot":    "fault",  // failover
	"older-than":       "fault",  // prune-outage
	"batch-size":       "fault",
	"pause":            "fault",
	"all-rows":         "fault", // slot-lost: recover
	"accept-loss":      "fault",
	"force":            "fault",
	"wait":             "fault", // reshard
	"retire":           "fault",
}

// seamNotModes are the settings that select no mode the matrix varies, each with why or with the
// test that covers its seams instead.
var seamNotModes = map[string]string{
	"database-url":       "a connection",
	"database-password":  "a credential",
	"amqp-password":      "a credential",
	"amqp-ca-file":       "TLS: TestTLS* (test/e2e)",
	"amqp-cert-file":     "TLS: TestTLS* (test/e2e)",
	"amqp-key-file":      "TLS: TestTLS* (test/e2e)",
	"replication-url":    "decoding on a standby: standby_decoding_test.go, TestReshardOnAStandby",
	"relay-role":         "a least-privileged role: security_test.go, searchpath_test.go",
	"slot":               "a name",
	"publication":        "a name",
	"exchange":           "a name",
	"alternate-exchange": "unroutable rows: stall_test.go",
	"park-exchange":      "parked rows: badrows_test.go, toolarge_test.go",
	"max-message-size":   "parked rows: toolarge_test.go",
	"window":             "a bound: window_test.go",
	"status-interval":    "a timing",
	"shutdown-timeout":   "a timing",
	"create-slot":        "start-up: slot_test.go",
	"wait-for-servers":   "start-up: setup_test.go",
	"listen":             "observability",
	"otlp-endpoint":      "observability: tracing_test.go",
	"log-level":          "observability",
	"log-format":         "observability",
	"no-slot":            "migrate for a role without REPLICATION: security_test.go",
	"json":               "output format",
	"relay-url":          "status reads the relay",
	"require-relay":      "status's exit code",
	"dry-run":            "changes nothing",
	"all":                "which parked rows: parked_test.go, parked_seams_test.go, parked_stream_test.go, parked_shared_test.go",
	"yes":                "confirms a discard: parked_test.go",
	"since":              "which rows replay sends: replay_test.go",
	"until":              "which rows replay sends: replay_test.go",
	"aggregate-type":     "which rows replay sends: replay_test.go",
	"aggregate-id":       "which rows replay sends: replay_test.go",
	"event-type":         "which rows replay sends: replay_test.go",
	"rate":               "a timing: replay_test.go",
	"canary-interval": "a message like a row, off in the matrix: canary_test.go (faults), internal/relayd and " +
		"replication (shards, standby, --replication-url, stream, two databases, a least-privileged broker user)",
}

// seamModeCommands maps each command that is a fault of the matrix to its fault; the others
// (migrate, run, status, doctor, version) set a mode up or read one.
var seamModeCommands = map[string]string{"prune": "prune-outage", "recover": "slot-lost", "reshard": "reshard"}

// Every setting of every walbox command, as --help lists them from the settings table, selects a
// mode the matrix varies or is excluded with a reason; every command that changes the slots or
// the table is a fault of the matrix. A mode added to walbox fails here until a cell covers it.
func TestEveryModeHasACell(t *testing.T) {
	bin := testenv.Build(t, "cmd/walbox")
	help := func(args ...string) string {
		out, _ := testenv.Run(t, exec.Command(bin, args...), time.Minute)
		return out
	}
	commands := regexp.MustCompile(`(?m)^  ([a-z]+)  `).FindAllStringSubmatch(help("--help"), -1)
	if len(commands) < 5 {
		t.Fatalf("walbox --help lists %d commands", len(commands))
	}
	dims := map[string]bool{}
	faults := seamDimensions[len(seamDimensions)-1].values
	for _, d := range seamDimensions {
		dims[d.name] = true
	}
	flag := regexp.MustCompile(`(?m)^  -([a-z-]+)`)
	seen := map[string]bool{}
	for _, m := range commands {
		cmd := m[1]
		if f, ok := seamModeCommands[cmd]; ok && !slices.Contains(faults, f) {
			t.Errorf("walbox %s is the fault %q, which the matrix does not have", cmd, f)
		}
		for _, fm := range flag.FindAllStringSubmatch(help(cmd, "--help"), -1) {
			name := fm[1]
			seen[name] = true
			dim, mode := seamModeFlags[name]
			_, not := seamNotModes[name]
			switch {
			case mode && not:
				t.Errorf("--%s is both a mode (%s) and not one", name, dim)
			case mode && !dims[dim]:
				t.Errorf("--%s selects a mode of the dimension %q, which the matrix does not have", name, dim)
			case !mode && !not:
				t.Errorf("walbox %s --%s: a setting the seam matrix does not know. If it selects a mode, add its values "+
					"to seamDimensions and seamModeFlags (test/faults/seams_test.go) and a row to docs/seams.md; "+
					"else add it to seamNotModes with the reason", cmd, name)
			}
		}
	}
	for name := range seamModeFlags {
		if !seen[name] {
			t.Errorf("seamModeFlags names --%s, which no command takes", name)
		}
	}
	for name := range seamNotModes {
		if !seen[name] {
			t.Errorf("seamNotModes names --%s, which no command takes", name)
		}
	}
	run, refusals := seamCells(t)
	for d, dim := range seamDimensions {
		for v, val := range dim.values {
			if !slices.ContainsFunc(append(run, refusals...), func(c cell) bool { return c[d] == v }) {
				t.Errorf("no cell runs %s=%s", dim.name, val)
			}
		}
	}
}

// seamCells returns the matrix: the cells to run and the refusal cells.
func seamCells(t *testing.T) (run, refusals []cell) {
	t.Helper()
	refused, err := refusedPairs(seamDimensions, seamRefusals)
	if err != nil {
		t.Fatal(err)
	}
	run, refusals = coveringArray(seamDimensions, refused)
	return run, refusals
}

// The matrix as docs/seams.md lists it: go test -run TestSeamsDocListsTheCells -v prints it.
func TestSeamsDocListsTheCells(t *testing.T) {
	run, refusals := seamCells(t)
	doc, err := os.ReadFile("../../docs/seams.md")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range append(run, refusals...) {
		line := seamDocRow(i+1, c)
		t.Log(line)
		if !strings.Contains(string(doc), line) {
			t.Errorf("docs/seams.md lacks the row\n%s", line)
		}
	}
}

// seamDocRow is the cell's row in docs/seams.md: its number, its values and its promise.
func seamDocRow(n int, c cell) string {
	row := "| " + itoa(n) + " |"
	for d, v := range c {
		row += " " + seamDimensions[d].values[v] + " |"
	}
	return row + " " + seamPromise(c) + " |"
}

// The cell's values by dimension name.
func (c cell) is(dim, value string) bool {
	d, v, err := valueOf(seamDimensions, dim+"="+value)
	return err == nil && c[d] == v
}

// seamPromise is what the cell checks, in a few words.
func seamPromise(c cell) string {
	refused, _ := refusedPairs(seamDimensions, seamRefusals)
	if r, ok := c.refusedIn(refused); ok {
		return fmt.Sprintf("refused: `walbox %s` exits %d: %q", r.cmd, r.code, r.msg)
	}
	switch {
	case c.is("fault", "restore"):
		return "every row written after the restore delivered, or walbox stops in one line naming the restore"
	case c.is("publisher", "stream") && c.is("fault", "reshard"):
		return "none lost or phantom; order per aggregate; rows after the cut may be stored twice"
	case c.is("publisher", "stream"):
		return "each row once; order per aggregate"
	case c.is("source", "emit") && c.is("fault", "slot-lost"):
		return "rows: none lost or phantom; emitted messages of the gap lost, as recover warns"
	}
	return "none lost or phantom; order per aggregate"
}

// seamQuick are the cells `make test` runs, by number: cheap ones on the shared servers, cell 5,
// which found recover's order within a transaction, and two refusals (33 found migrate's). `make soak` runs every cell.
var seamQuick = []int{1, 5, 10, 33, 37}

// The seam matrix (docs/seams.md): each cell runs the writer and the checker over its modes under
// its fault, and checks what the combination promises; a refused pair checks the refusal.
func TestSeams(t *testing.T) {
	heavy(t)
	run, refusals := seamCells(t)
	for i, c := range append(run, refusals...) {
		n := i + 1
		only := os.Getenv("WALBOX_SEAM_CELL") // cells by number, comma-separated
		if only != "" && !slices.Contains(strings.Split(only, ","), itoa(n)) || only == "" && !soaking() && !slices.Contains(seamQuick, n) {
			continue
		}
		t.Run(itoa(n)+"_"+c.name(seamDimensions), func(t *testing.T) { runSeamCell(t, n, c) })
	}
}
