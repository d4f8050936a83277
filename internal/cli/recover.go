package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/logs"

	"github.com/walbox/walbox/internal/doctor"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/schedule"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/wire"
)

const recoverSummary = "Recover from a lost, dropped, invalidated or replaced replication slot, or one walbox run stopped on " +
	"(walbox status and walbox doctor show such a stop), in keep-rows retention: " +
	"show the gap since the last recorded position, create the new slot first, republish from the outbox tables, " +
	"with their original ids, every row that may have committed in the gap, and once the broker confirmed them all, " +
	"record the new slot so that `walbox run` continues from it; with --stream-url and --stream, into that stream, exactly once. " +
	"Stop walbox run first. " +
	"Takes run's database, table (config file tables) and broker settings. The role needs REPLICATION, SELECT on the " +
	"outbox tables and write on walbox_slots (the role that ran walbox migrate, given REPLICATION)"

func runRecover(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon("recover")
	fs := newFlagSet("recover", recoverSummary, stderr)
	if err := c.parse(fs, args); err != nil {
		return err
	}
	target, err := doctorStream(c)
	if err != nil {
		return err
	}
	cfg, eps, err := recoverConfig(c, target != nil)
	if err != nil {
		return err
	}
	dry := c.v.dryRun
	fail := c.fail
	// Every node of --amqp-url, in turn, as walbox run dials them; or the stream, as run's.
	// Rows due later go to the schedule, as walbox run's would.
	cfg.Dial = func(ctx context.Context) (slots.Publisher, error) {
		s, err := eps.Dial(ctx)
		if err != nil {
			return nil, err
		}
		return schedule.Wrap(ctx, s, cfg.DatabaseURL, cfg.Table.Schema, cfg.Slot, wire.DefaultWindow, nil, nil)
	}
	if target != nil {
		logs.SetLogger(quietStreamClient{})
		cfg.Dial = func(ctx context.Context) (slots.Publisher, error) {
			return streampub.Dial(ctx, streampub.Config{URIs: target.URIs, Stream: target.Stream, Slot: cfg.Slot})
		}
	}
	cfg.OnParked = func(p *wire.Parked) {
		fmt.Fprintf(stdout, "parked %s from %s: %s\n", p.Message.AMQPMessageID(), p.Table, p.Reason)
	}
	if eps != nil {
		eps.WatchQueues(parkWaitNotice(stderr))
	}

	ctx, stop := signalContext(ctx, func() {})
	defer stop()
	rec, err := slots.OpenRecovery(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	defer rec.Close()
	gap, err := rec.Inspect(ctx)
	if err != nil {
		return fail(err)
	}
	showGap(stdout, cfg.Slot, gap)
	if target != nil && dry {
		// walbox run's checks: the stream's last row beyond the server's WAL, or rows it skips not the stream's.
		a := doctor.AnchorCheck(ctx, doctor.Config{DatabaseURL: cfg.DatabaseURL, ReplicationURL: cfg.ReplicationURL,
			Slot: cfg.Slot, Publication: cfg.Publication, Table: cfg.Table, Mappings: cfg.Mappings,
			Prefix: relayedPrefix(c.v.relay.MessagePrefix), Stream: target})
		if a.Status == "fail" {
			return fail(errors.New(a.Message))
		}
		fmt.Fprintf(stdout, "  stream                  %s\n", a.Message)
	}
	if gap.None() {
		fmt.Fprintf(stdout, "no gap: slot %s continues from the recorded position; nothing to do\n", cfg.Slot)
		return nil
	}
	if target != nil {
		if err := streamThere(c, target); err != nil {
			return fail(err)
		}
	}
	if prefix := relayedPrefix(c.v.relay.MessagePrefix); prefix != "" {
		// Nothing but the slot ever held them: say so before anything claims the gap closed.
		fmt.Fprintf(stdout, "messages written with %s (or any logical decoding message with prefix %q) have no row: "+
			"those committed in the gap cannot be republished and are lost; only the outbox tables' rows are\n",
			cfg.Table.EmitFunction(), prefix)
	}
	if dry {
		counts, err := rec.Count(ctx, gap)
		if counts != nil {
			showCounts(stdout, gap, counts, target)
		}
		if err != nil {
			return fail(err)
		}
		return nil
	}
	res, err := rec.Recover(ctx, gap)
	if err != nil {
		if res.ConsistentPoint != 0 {
			err = fmt.Errorf("%w (the new slot exists at %s but is not recorded yet, so walbox run refuses it; "+
				"run walbox recover again: it repeats the recovery, which can only publish duplicates)", err, res.ConsistentPoint)
		}
		return fail(err)
	}
	fmt.Fprintf(stdout, "created slot %s at %s; rows committed after that stream from it\n", cfg.Slot, res.ConsistentPoint)
	switch {
	case target != nil:
		// A partial gap is never called confirmed in full.
		confirmed := "every one confirmed by the broker"
		if res.LossAccepted {
			confirmed = "confirmed by the broker"
		}
		fmt.Fprintf(stdout, "published %d rows into stream %s (%d parked); %d of the %d rows of the gap the stream held already; "+
			"%s, in %s\n", res.Published, target.Stream, res.Parked, res.Held, res.Rows, confirmed,
			res.Duration.Round(time.Millisecond))
		if res.LossAccepted {
			fmt.Fprintf(stdout, "those were all the gap's rows that were left; those deleted from the outbox tables are lost (--accept-loss)\n")
		}
	case res.LossAccepted:
		fmt.Fprintf(stdout, "republished %d rows (%d parked), confirmed by the broker, in %s: all the gap's rows that were left; "+
			"those deleted from the outbox tables are lost (--accept-loss)\n", res.Rows, res.Parked, res.Duration.Round(time.Millisecond))
	default:
		fmt.Fprintf(stdout, "republished %d rows (%d parked), every one confirmed by the broker, in %s\n",
			res.Rows, res.Parked, res.Duration.Round(time.Millisecond))
	}
	if res.Scheduled > 0 {
		fmt.Fprintf(stdout, "%d of them have a deliver_at: they went to the schedule, which sends each when due unless cancelled\n", res.Scheduled)
	}
	fmt.Fprintf(stdout, "recorded slot %s at %s: start walbox run\n", cfg.Slot, res.ConsistentPoint)
	return nil
}

// streamThere refuses a stream that does not exist: recover does not declare one. A wrong
// --stream would take the gap's rows where no consumer reads them.
func streamThere(c *common, target *doctor.StreamConfig) error {
	ok, err := streampub.Exists(target.URIs, target.Stream)
	if err != nil {
		return fmt.Errorf("stream url: %w", err)
	}
	if !ok {
		return badSetting(c.s.get("stream"), "stream %s does not exist; give the stream walbox run publishes to. "+
			"recover does not declare one: a wrong name would take the gap's rows. "+
			"If the stream was deleted, declare it again first (a queue of type stream)", target.Stream)
	}
	return nil
}

// recoverConfig is recover's configuration from its settings, with run's broker endpoints. Into
// a stream (streaming), or with --dry-run, it dials no broker and needs no AMQP URL.
func recoverConfig(c *common, streaming bool) (slots.RecoverConfig, *publisher.Endpoints, error) {
	r, cfg := c.v.relay, c.v.recover
	cfg.DatabaseURL, cfg.ReplicationURL, cfg.Table, cfg.Mappings = r.DatabaseURL, r.ReplicationURL, r.Table, c.mappings()
	cfg.Slot, cfg.Publication, cfg.FailoverSlot = r.Slot, r.Publication, r.FailoverSlot
	if c.v.dryRun || streaming {
		return cfg, nil, nil
	}
	eps, err := c.brokers("walbox")
	return cfg, eps, err
}

func showGap(w io.Writer, slot string, g slots.Gap) {
	r := g.Record
	fmt.Fprintf(w, "slot %s\n", slot)
	fmt.Fprintf(w, "  last recorded position  %s at %s (origin %s)\n", r.ConfirmedLSN,
		r.ConfirmedAt.UTC().Format(time.RFC3339), r.Origin)
	if r.ConfirmedXmin != 0 {
		fmt.Fprintf(w, "  recorded xmin horizon   %d\n", r.ConfirmedXmin)
	} else {
		fmt.Fprintf(w, "  recorded xmin horizon   none\n")
	}
	var state string
	switch g.State {
	case slots.SlotHealthy:
		state = fmt.Sprintf("exists at %s, not ahead of the record", g.SlotLSN)
		switch {
		case r.Stop.Stopped():
			state += "; replaced, since walbox run stopped on it"
		case !g.None():
			state += "; replaced on request (--force)"
		}
	case slots.SlotMissing:
		state = "missing (dropped, or left behind by a failover)"
	case slots.SlotLost:
		state = fmt.Sprintf("lost (invalidated at %s: max_slot_wal_keep_size)", g.SlotLSN)
	case slots.SlotAhead:
		state = fmt.Sprintf("ahead at %s (recreated or advanced behind walbox's back)", g.SlotLSN)
	case slots.SlotOtherSystem:
		state = fmt.Sprintf("on another system: recorded on %s, this server is %s", r.SystemID, g.SystemID)
	}
	fmt.Fprintf(w, "  slot                    %s\n", state)
	if r.Stop.Stopped() {
		fmt.Fprintf(w, "  stopped                 at %s (%s): %s\n", r.Stop.LSN, r.Stop.At.UTC().Format(time.RFC3339), r.Stop.Reason)
	}
}

func showCounts(w io.Writer, g slots.Gap, counts []slots.Count, target *doctor.StreamConfig) {
	var total int64
	for _, c := range counts {
		total += c.Rows
		note := ""
		if c.Empty {
			note = " (the table is empty)"
		}
		if c.Deleted > 0 {
			note += fmt.Sprintf(" (%d rows deleted that walbox prune did not delete: rows of the gap may be gone)", c.Deleted)
		}
		fmt.Fprintf(w, "  %-22s  %d rows%s\n", c.Table.String(), c.Rows, note)
	}
	if target != nil {
		fmt.Fprintf(w, "dry run: counted %d rows that may have committed after %s; recover %s; nothing changed\n",
			total, g.Record.ConfirmedLSN, doctor.StreamRecoverPlan(target.Stream))
		return
	}
	fmt.Fprintf(w, "dry run: would republish %d rows that may have committed after %s (counted now: an upper bound, "+
		"rows committed before it are published again too); nothing changed\n", total, g.Record.ConfirmedLSN)
}

// parkWaitNotice says once that a row waits for its park queue, which cannot be declared. Its
// node may be down, say. Recover waits for it rather than lose the row, and not in silence.
func parkWaitNotice(w io.Writer) func(publisher.QueueState) {
	var once sync.Once
	return func(st publisher.QueueState) {
		if st.Waiting {
			once.Do(func() {
				fmt.Fprintf(w, "waiting to park a row: queue %s cannot be declared (%v); it goes on once the queue is back, "+
					"or Ctrl-C stops\n", st.Queue, st.Err)
			})
		}
	}
}
