package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/redact"
)

// slotStatus is what `walbox status` shows.
type slotStatus struct {
	Slot              string  `json:"slot"`
	Exists            bool    `json:"exists"`
	Plugin            string  `json:"plugin,omitempty"`
	Active            bool    `json:"active"`
	ActivePID         *int32  `json:"active_pid"`
	ConfirmedFlushLSN string  `json:"confirmed_flush_lsn,omitempty"`
	RestartLSN        string  `json:"restart_lsn,omitempty"`
	CurrentWALLSN     string  `json:"current_wal_lsn"`
	LagBytes          *int64  `json:"lag_bytes"`
	RetainedWALBytes  *int64  `json:"retained_wal_bytes"`
	WALStatus         *string `json:"wal_status"`
	// MessagePrefix is the prefix of the logical decoding messages relayed like rows ("" for
	// none); EmitFunction whether the outbox table's schema has the function that writes them.
	MessagePrefix string `json:"message_prefix"`
	EmitFunction  bool   `json:"emit_function"`
	// Shards lists the sets of shards that publish the outbox table, when it is sharded or being
	// resharded; the fields above then describe the single slot, which may not exist.
	Shards []setStatus `json:"shard_sets,omitempty"`
	// Relay is what the running relay reports at its /status, when it can be reached.
	Relay      *relayStatus `json:"relay,omitempty"`
	RelayError string       `json:"relay_error,omitempty"`
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon()
	asJSON := c.s.addBool("json", "", "false", "print JSON for scripts")
	requireRelay := c.s.addBool("require-relay", "", "false",
		"exit 1 unless the relay answers and is streaming or a standby (for container health checks)")
	relayURL := c.s.add("relay-url", "WALBOX_RELAY_URL", "http://127.0.0.1:9187",
		"the running relay's HTTP address, for its state and last error (\"off\" to skip)")
	fs := newFlagSet("status", "Show the replication slot's position, lag and state", stderr)
	if err := c.parse(fs, args); err != nil {
		return err
	}
	dsn, err := c.dsn()
	if err != nil {
		return err
	}
	wantJSON, err := asJSON.bool()
	if err != nil {
		return err
	}
	fail := func(err error) error { return errors.New(redact.Text(err.Error(), c.secrets()...)) }

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fail(fmt.Errorf("connect to postgres: %w", err))
	}
	defer conn.Close(context.Background())
	st, err := readStatus(ctx, conn, c.slot.value)
	if err != nil {
		return fail(err)
	}
	table, err := c.outboxTable()
	if err != nil {
		return err
	}
	emit, err := readEmit(ctx, conn, table, relayedPrefix(c.messagePrefix.value))
	if err != nil {
		return fail(err)
	}
	st.MessagePrefix, st.EmitFunction = emit.prefix, emit.exists
	problem, err := readShardStatus(ctx, conn, c, &st)
	if err != nil {
		return fail(err)
	}
	if relayURL.value != "off" && relayURL.value != "" {
		st.Relay, err = fetchRelayStatus(ctx, relayURL.value)
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
	}
	if problem != "" {
		return errors.New(problem)
	}
	if !st.Exists && st.Shards == nil {
		return fmt.Errorf("slot %s does not exist", st.Slot)
	}
	if need, _ := requireRelay.bool(); need {
		if st.Relay == nil {
			return fmt.Errorf("relay not reachable at %s", relayURL.value)
		}
		if st.Relay.State != "streaming" && st.Relay.State != "standby" {
			return fmt.Errorf("relay is %s: %s", st.Relay.State, st.Relay.LastError)
		}
	}
	if st.WALStatus != nil && *st.WALStatus == "lost" {
		return fmt.Errorf("slot %s is invalidated (wal_status lost)", st.Slot)
	}
	return nil
}

func readStatus(ctx context.Context, conn *pgx.Conn, slot string) (slotStatus, error) {
	sl, err := inspect.ReadSlot(ctx, conn, slot)
	if err != nil {
		return slotStatus{Slot: slot, CurrentWALLSN: sl.CurrentWAL.String()}, err
	}
	return slotFromInspect(sl), nil
}

func printStatus(w io.Writer, st slotStatus) {
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
	printRelay(w, st)
}

// messagesLine says whether emitted messages are relayed, with which prefix.
func messagesLine(st slotStatus) string {
	if st.MessagePrefix == "" {
		return "off (table only)"
	}
	fn := "walbox_emit missing"
	if st.EmitFunction {
		fn = "walbox_emit present"
	}
	return fmt.Sprintf("prefix %s (%s)", st.MessagePrefix, fn)
}

func printRelay(w io.Writer, st slotStatus) {
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

// fetchRelayStatus reads the running relay's /status.
func fetchRelayStatus(ctx context.Context, base string) (*relayStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /status: %s", resp.Status)
	}
	var rs relayStatus
	if err := json.NewDecoder(resp.Body).Decode(&rs); err != nil {
		return nil, fmt.Errorf("GET /status: %w", err)
	}
	return &rs, nil
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
