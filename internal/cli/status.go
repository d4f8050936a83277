package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/logs"

	"github.com/walbox/walbox/internal/doctor"
	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/internal/status"
)

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon("status")
	fs := newFlagSet("status", "Show the replication slot's position, lag and state", stderr)
	if err := c.parse(fs, args); err != nil {
		return err
	}
	r, wantJSON, need, relayURL := c.v.relay, c.v.json, c.v.requireRelay, c.v.relayURL
	dsn, replURL := r.DatabaseURL, r.ReplicationURL
	q := status.Query{Slot: r.Slot, Publication: r.Publication, Prefix: relayedPrefix(r.MessagePrefix), Table: r.Table}
	fail := c.fail

	conn, err := pgconnect.Connect(ctx, dsn)
	if err != nil {
		return fail(fmt.Errorf("connect to postgres: %w", err))
	}
	defer conn.Close(context.Background())
	if replURL != "" {
		if q.Standby, err = pgconnect.Connect(ctx, replURL); err != nil {
			return fail(fmt.Errorf("connect to the standby: %w", err))
		}
		defer q.Standby.Close(context.Background())
	}
	st, err := status.Read(ctx, conn, q)
	if err != nil {
		return fail(err)
	}
	target, err := doctorStream(c)
	if err != nil {
		return err
	}
	if target != nil {
		st.Stream = streamStatus(ctx, c, target)
	}
	if relayURL != "off" && relayURL != "" {
		st.Relay, err = status.FetchRelay(ctx, relayURL)
		if err != nil {
			st.RelayError = redact.Text(err.Error(), c.secrets()...)
		}
	}
	if wantJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			return err
		}
	} else {
		printStatus(stdout, st)
		printShards(stdout, st.Shards)
		printStream(stdout, st.Stream)
	}
	return st.Verdict(need, relayURL)
}

func printStatus(w io.Writer, st status.Report) {
	if !st.Exists && st.Shards != nil {
		return
	}
	if !st.Exists {
		fmt.Fprintf(w, "slot                 %s (missing)\ncurrent_wal_lsn      %s\n", st.Slot, st.CurrentWALLSN)
		return
	}
	pid := "-"
	if st.ActivePID != nil {
		pid = fmt.Sprint(*st.ActivePID)
	}
	fmt.Fprintf(w, "slot                 %s (%s)\n", st.Slot, st.Plugin)
	fmt.Fprintf(w, "active               %t\n", st.Active)
	fmt.Fprintf(w, "active_pid           %s\n", pid)
	fmt.Fprintf(w, "confirmed_flush_lsn  %s\n", st.ConfirmedFlushLSN)
	fmt.Fprintf(w, "restart_lsn          %s\n", st.RestartLSN)
	fmt.Fprintf(w, "current_wal_lsn      %s\n", st.CurrentWALLSN)
	fmt.Fprintf(w, "lag_bytes            %s\n", optInt(st.LagBytes))
	fmt.Fprintf(w, "retained_wal_bytes   %s\n", optInt(st.RetainedWALBytes))
	fmt.Fprintf(w, "wal_status           %s\n", optString(st.WALStatus))
	fmt.Fprintf(w, "messages             %s\n", messagesLine(st))
	fmt.Fprintf(w, "schedule             %s\n", scheduleLine(st.Schedule))
	if s := st.Stopped; s != nil {
		fmt.Fprintf(w, "stopped              at %s (%s); way out: put the cause right, then %s\n", s.LSN,
			s.At.UTC().Format(time.RFC3339), s.WayOut)
	}
	printRelay(w, st)
}

// streamBound bounds status's stream checks: a stream node that does not answer holds status no
// longer.
const streamBound = 4 * doctor.Timeout

// streamStatus runs doctor's stream checks with status's settings, as run takes them. They are the
// stream's node and stream_anchor on each relay's slot.
func streamStatus(ctx context.Context, c *common, target *doctor.StreamConfig) []status.StreamCheck {
	logs.SetLogger(quietStreamClient{})
	r := c.v.relay
	cfg := doctor.Config{DatabaseURL: r.DatabaseURL, ReplicationURL: r.ReplicationURL, Slot: r.Slot, Publication: r.Publication,
		Table: r.Table, Prefix: relayedPrefix(r.MessagePrefix), Mappings: c.mappings(), Stream: target}
	var out []status.StreamCheck
	for _, ch := range doctor.StreamStatus(ctx, cfg, streamBound) {
		out = append(out, status.StreamCheck{Name: ch.Name, Status: ch.Status,
			Message: redact.Text(ch.Message, c.secrets()...), WayOut: redact.Text(ch.Fix, c.secrets()...)})
	}
	return out
}

// printStream says what the stream checks found. That is stream_anchor's verdict on each slot,
// and a node or stream that is not there.
func printStream(w io.Writer, checks []status.StreamCheck) {
	for _, ch := range checks {
		switch {
		case ch.Name == "stream_broker" && ch.Status != "pass":
			fmt.Fprintf(w, "stream               not reachable (%s): the stream's last row is not checked\n", ch.Message)
		case ch.Name == "stream_anchor" && ch.Status == "fail":
			fmt.Fprintf(w, "stream               %s; way out: %s\n", ch.Message, ch.WayOut)
		case ch.Name == "stream_anchor" || ch.Status != "pass":
			fmt.Fprintf(w, "stream               %s\n", ch.Message)
		}
	}
}

// scheduleLine says how many scheduled messages wait, how many are overdue, and the next due.
func scheduleLine(s *status.Schedule) string {
	switch {
	case s == nil:
		return "missing (run walbox migrate)"
	case s.NextDue == nil:
		return "0 waiting"
	}
	return fmt.Sprintf("%d waiting, %d overdue, next due %s", s.Waiting, s.Overdue, s.NextDue.UTC().Format(time.RFC3339))
}

// messagesLine says whether emitted messages are relayed, with which prefix.
func messagesLine(st status.Report) string {
	if st.MessagePrefix == "" {
		return "off (table only)"
	}
	fn := "walbox_emit missing"
	if st.EmitFunction {
		fn = "walbox_emit present"
	}
	return fmt.Sprintf("prefix %s (%s)", st.MessagePrefix, fn)
}

func printRelay(w io.Writer, st status.Report) {
	if st.Relay == nil {
		if st.RelayError != "" {
			fmt.Fprintf(w, "relay                not reachable (%s)\n", st.RelayError)
		}
		return
	}
	r := st.Relay
	fmt.Fprintf(w, "relay_state          %s\n", r.State)
	fmt.Fprintf(w, "published            %d (confirmed %d, parked %d, in flight %d)\n", r.Published, r.Confirmed, r.Parked, r.InFlight)
	broker := r.Broker
	if broker == "" {
		broker = "- (not connected)"
	}
	fmt.Fprintf(w, "broker               %s\n", broker)
	last := r.LastError
	if last == "" {
		last = "-"
	}
	fmt.Fprintf(w, "last_error           %s\n", last)
}

func optInt(p *int64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func optString(p *string) string {
	if p == nil {
		return "-"
	}
	return *p
}
