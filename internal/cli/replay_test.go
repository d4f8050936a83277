package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/replay"
	"github.com/walbox/walbox/outbox"
)

// Bad input to walbox replay is one line and exit 2, before any server is read: the stream mode,
// an empty time range, a bad time, rate or flag. The servers here are unreachable.
func TestReplayRefusesBadInputWithOneLine(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"the stream mode", []string{"--stream-url=rabbitmq-stream://127.0.0.1:1/"}, "--stream-url (WALBOX_STREAM_URL): walbox replay does not publish into a stream"},
		{"until before since", []string{"--since=2026-11-28T10:00:00Z", "--until=2026-11-28T09:00:00Z"}, "--until (WALBOX_REPLAY_UNTIL): 2026-11-28T09:00:00Z is not after --since"},
		{"until equal to since", []string{"--since=2026-11-28", "--until=2026-11-28T00:00:00Z"}, "is not after --since"},
		{"a time it cannot read", []string{"--since=yesterday"}, `--since (WALBOX_REPLAY_SINCE): "yesterday" is not a time`},
		{"a negative rate", []string{"--rate=-5"}, `--rate (WALBOX_REPLAY_RATE): "-5" is not a number of messages a second`},
		{"an unknown flag", []string{"--event=order.created"}, "unknown flag --event"},
		// An empty value, as from an unset shell variable, would filter nothing: every row would go out.
		{"an empty aggregate id", []string{"--aggregate-id="}, "--aggregate-id (WALBOX_REPLAY_AGGREGATE_ID): empty"},
		{"an empty event type", []string{"--event-type", ""}, "--event-type (WALBOX_REPLAY_EVENT_TYPE): empty"},
		{"an empty since", []string{"--aggregate-type=order", "--since="}, "--since (WALBOX_REPLAY_SINCE): empty"},
		// Year 1 is the zero time, which the filter reads as no bound: every row would go out.
		{"until the zero time", []string{"--until=0001-01-01"}, `--until (WALBOX_REPLAY_UNTIL): "0001-01-01" is the zero time`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			t.Setenv("WALBOX_DATABASE_URL", "postgres://u@127.0.0.1:1/db?connect_timeout=1")
			t.Setenv("WALBOX_AMQP_URL", "amqp://127.0.0.1:1/")
			var out bytes.Buffer
			code := mainWithExit(context.Background(), append([]string{"replay"}, tt.args...), &out, &out)
			got := out.String()
			if code != 2 || strings.Count(got, "\n") != 1 || !strings.HasPrefix(got, "walbox replay: ") || !strings.Contains(got, tt.want) {
				t.Errorf("walbox replay %v exited %d:\n%s\nwant 2 and one line with %q", tt.args, code, got, tt.want)
			}
		})
	}
}

// Off a terminal, each report of a running replay is one line: rows sent of those matched, the
// percentage and the table.
func TestReplayProgressIsALineEachReportOffATerminal(t *testing.T) {
	var out bytes.Buffer
	bar := newProgressBar(&out, replay.Plan{ID: "abc", Matched: 200, Sent: 50})
	bar.show(replay.Progress{Sent: 100, Matched: 200, Table: outbox.DefaultTable})
	bar.show(replay.Progress{Sent: 200, Matched: 200, Table: outbox.DefaultTable})
	bar.end()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "replay abc: 100 of 200 rows sent (50%), ") ||
		!strings.HasPrefix(lines[1], "replay abc: 200 of 200 rows sent (100%), ") || !strings.HasSuffix(lines[1], "table public.outbox") {
		t.Errorf("progress off a terminal:\n%s\nwant two lines, 100 then 200 of 200 rows sent", out.String())
	}
}
