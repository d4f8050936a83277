package status

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/schedule"
	"github.com/walbox/walbox/shard"
)

// Report is what `walbox status` shows.
type Report struct {
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
	// MessagePrefix is the prefix of the logical decoding messages relayed like rows ("" for none).
	// EmitFunction says whether the outbox table's schema has the function that writes them.
	MessagePrefix string `json:"message_prefix"`
	EmitFunction  bool   `json:"emit_function"`
	// Schedule is the scheduled messages waiting, of every slot; nil before walbox migrate created it.
	Schedule *Schedule `json:"schedule,omitempty"`
	// Shards lists the sets of shards that publish the outbox table, when it is sharded or being
	// resharded. The fields above then describe the single slot, which may not exist.
	Shards []Set `json:"shard_sets,omitempty"`
	// Stopped is the stop walbox run recorded on the slot, where only walbox recover gets past;
	// nil if none.
	Stopped *Stop `json:"stopped,omitempty"`
	// Stream is what walbox doctor's stream checks say, with --stream-url; nil without. A
	// stream_anchor check that fails names a restored server, or an old primary, and its way out.
	Stream []StreamCheck `json:"stream,omitempty"`
	// Relay is what the running relay reports at its /status, when it can be reached.
	Relay      *Relay `json:"relay,omitempty"`
	RelayError string `json:"relay_error,omitempty"`

	problems []string // a shard slot missing or lost, a shard mismatch, the slot ahead of its record
}

// Schedule is the messages waiting for their deliver_at (docs/outbox.md#scheduled-delivery).
type Schedule struct {
	Waiting int64 `json:"waiting"`
	// Overdue are due already: they leave soon, or their relay is not running.
	Overdue int64      `json:"overdue"`
	NextDue *time.Time `json:"next_due"`
}

// Stop is a stop walbox run recorded. It says where: everything committed up to LSN was delivered.
// It says when, why, and the command that gets past it.
type Stop struct {
	LSN    string    `json:"lsn"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
	WayOut string    `json:"way_out"`
}

// StreamCheck is one of walbox doctor's stream checks. It has a name, a status (pass, warn or
// fail), what it found and the way out.
type StreamCheck struct {
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message"`
	WayOut  string `json:"way_out,omitempty"`
}

// streamFailure returns the stream_anchor check that fails, if one does. A stream node that does
// not answer is no failure of the slot's: status says so, and judges the rest.
func (r Report) streamFailure() *StreamCheck {
	for i, c := range r.Stream {
		if c.Name == "stream_anchor" && c.Status == "fail" {
			return &r.Stream[i]
		}
	}
	return nil
}

// wayOut is the command that gets past a recorded stop (replication.WayOut).
const wayOut = "walbox recover --force"

// Query names what to read: the settings `walbox run` uses.
type Query struct {
	Slot, Publication string
	Table             outbox.Table
	Prefix            string // the relayed message prefix, "" for none
	// Standby, if set, is a connection to the hot standby walbox decodes on (--replication-url).
	// The slot is read there, the rest on the primary.
	Standby *pgx.Conn
}

// Read reads the slot, the emit function and the sets of shards over conn.
func Read(ctx context.Context, conn *pgx.Conn, q Query) (Report, error) {
	slotDB := conn
	if q.Standby != nil {
		slotDB = q.Standby
	}
	sl, err := inspect.ReadSlot(ctx, slotDB, q.Slot)
	if err != nil {
		return Report{}, err
	}
	r := fromSlot(sl)
	emit, err := inspect.ReadEmit(ctx, conn, q.Table, q.Prefix)
	if err != nil {
		return r, err
	}
	r.MessagePrefix, r.EmitFunction = emit.Prefix, emit.Exists
	sum, missing, err := schedule.ReadSummary(ctx, conn, q.Table.Schema)
	if err != nil {
		return r, err
	}
	if !missing {
		r.Schedule = &Schedule{Waiting: sum.Waiting, Overdue: sum.Overdue}
		if !sum.NextDue.IsZero() {
			r.Schedule.NextDue = &sum.NextDue
		}
	}
	if err := r.readRecord(ctx, conn, q, sl); err != nil {
		return r, err
	}
	layout, err := shard.ReadLayout(ctx, conn, q.Table, shard.Set{Slot: q.Slot, Publication: q.Publication})
	if err != nil {
		return r, err
	}
	return r, r.readShards(ctx, conn, slotDB, layout)
}

// readRecord compares the slot with walbox's record of it in the outbox table's schema, as walbox
// run does. It notes a stop recorded on the slot, or a slot ahead of the record. A slot gets ahead
// when it is recreated or advanced behind walbox's back. Run refuses either slot.
func (r *Report) readRecord(ctx context.Context, conn *pgx.Conn, q Query, sl inspect.Slot) error {
	reg := registry.New(conn, q.Table.Schema)
	if ok, err := reg.Exists(ctx); err != nil || !ok {
		return err
	}
	rec, ok, err := reg.Get(ctx, q.Slot)
	if err != nil || !ok {
		return err
	}
	if rec.Stop.Stopped() {
		r.Stopped = &Stop{LSN: rec.Stop.LSN.String(), At: rec.Stop.At, Reason: rec.Stop.Reason, WayOut: wayOut}
	}
	if sys := systemID(ctx, conn); sys != "" && sys != rec.SystemID {
		r.problems = append(r.problems, fmt.Sprintf("slot %s was recorded on the server with system identifier %s, but this "+
			"server is %s (a restore or a new cluster), and walbox run refuses it; run `walbox recover`", q.Slot, rec.SystemID, sys))
	}
	if sl.Exists && sl.ConfirmedFlush > rec.ConfirmedLSN {
		r.problems = append(r.problems, fmt.Sprintf("slot %s is at %s, ahead of %s, the last position walbox recorded: "+
			"it was recreated or advanced behind walbox's back, and walbox run refuses it; run `walbox recover`",
			q.Slot, sl.ConfirmedFlush, rec.ConfirmedLSN))
	}
	return nil
}

// systemID returns the server's system identifier, or "" where the role may not read it.
func systemID(ctx context.Context, conn *pgx.Conn) string {
	var id string
	if err := conn.QueryRow(ctx, "SELECT system_identifier::text FROM pg_catalog.pg_control_system()").Scan(&id); err != nil {
		return ""
	}
	return id
}

// Verdict says what is wrong, for the exit code:
//   - a shard slot missing or lost;
//   - the slot missing, ahead of its record, recorded on another server or invalidated;
//   - a stop recorded on the slot;
//   - a stream whose rows the server's WAL does not have (a restored server);
//   - if requireRelay, a relay that does not answer at relayURL, or is neither streaming nor a
//     standby.
func (r Report) Verdict(requireRelay bool, relayURL string) error {
	switch {
	case len(r.problems) > 0:
		return errors.New(strings.Join(r.problems, "; "))
	case !r.Exists && r.Shards == nil:
		return fmt.Errorf("slot %s does not exist", r.Slot)
	case r.Stopped != nil:
		return fmt.Errorf("walbox run stopped on slot %s at %s and refuses it until `%s`: %s",
			r.Slot, r.Stopped.LSN, r.Stopped.WayOut, r.Stopped.Reason)
	case r.streamFailure() != nil:
		c := r.streamFailure()
		return fmt.Errorf("%s; way out: %s", c.Message, c.WayOut)
	case requireRelay && r.Relay == nil:
		return fmt.Errorf("relay not reachable at %s", relayURL)
	case requireRelay && r.Relay.State != "streaming" && r.Relay.State != "standby":
		return fmt.Errorf("relay is %s: %s", r.Relay.State, r.Relay.LastError)
	case r.WALStatus != nil && *r.WALStatus == "lost":
		return fmt.Errorf("slot %s is invalidated (wal_status lost)", r.Slot)
	}
	return nil
}

func fromSlot(sl inspect.Slot) Report {
	r := Report{Slot: sl.Name, CurrentWALLSN: sl.CurrentWAL.String()}
	if !sl.Exists {
		return r
	}
	r.Exists, r.Plugin, r.Active, r.ActivePID = true, sl.Plugin, sl.Active, sl.ActivePID
	r.ConfirmedFlushLSN, r.RestartLSN = sl.ConfirmedFlush.String(), sl.Restart.String()
	r.LagBytes, r.RetainedWALBytes = sl.LagBytes, sl.RetainedBytes
	if sl.WALStatus != "" {
		r.WALStatus = &sl.WALStatus
	}
	return r
}
