package replication

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/registry"
)

// WayOut is the command that gets past a stop only walbox recover gets past (a recorded stop).
const WayOut = "walbox recover --force"

// ShardWayOut is WayOut for the slot and publication of a shard: walbox recover takes them by name.
func ShardWayOut(slot, publication string) string {
	return fmt.Sprintf("%s --slot %s --publication %s", WayOut, shellWord(slot), shellWord(publication))
}

// wayOut is the command that gets past this relay's recorded stop.
func (r *Relay) wayOut() string {
	if r.cfg.Shards > 0 {
		return ShardWayOut(r.cfg.Slot, r.cfg.Publication)
	}
	return WayOut
}

// errStopped means walbox run stopped on the slot earlier, and recorded it.
// Only walbox recover gets past such a stop.
// Putting the cause right does not let the slot deliver what it skipped.
var errStopped = errors.New("walbox stopped on this slot")

// needsRecover reports whether err is a stop the slot cannot get past, even once the cause is put right:
//   - an outbox column renamed or dropped mid-stream (decoder.ErrSchemaDrift).
//     The WAL has the rows written meanwhile in the old shape.
//     Decoding them fails at every replay.
//   - the publication dropped, no longer covering the inserts, or changed and put right again.
//     These are ErrNoPublication and ErrNotCovered.
//     Rows written meanwhile were never decoded, or their replay fails on the missing publication.
//
// Each needs the rows from the outbox table: walbox recover republishes them and replaces the slot.
func needsRecover(err error) bool {
	return !retryable(err) && (errors.Is(err, decoder.ErrSchemaDrift) || errors.Is(err, ErrNotCovered) ||
		errors.Is(err, ErrNoPublication))
}

// noteStop records err in the registry as the slot's stop, if only walbox recover gets past it.
// It returns err naming the way out, and the position up to which everything was delivered.
// A failing check at the first start (a mistyped publication, say) records nothing.
// No row was skipped yet, and putting the setting right is enough.
func (r *Relay) noteStop(w *watch, err error) error {
	if !needsRecover(err) || r.coverage == "" {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchTimeout)
	defer cancel()
	rec, ok, gerr := w.reg.Get(ctx, r.cfg.Slot)
	if gerr != nil || !ok {
		return err
	}
	if _, rerr := w.reg.RecordStop(ctx, r.cfg.Slot, err.Error(), rec.ConfirmedLSN); rerr != nil {
		r.cfg.Logger.Warn("could not record the stop in the registry: the next walbox run may not see it",
			"slot", r.cfg.Slot, "error", rerr)
	}
	return fatal(fmt.Errorf("%w. walbox stopped at %s: everything committed up to it was delivered, and the slot "+
		"cannot deliver what follows. %s, then run `%s` (add --dry-run first to count the rows it "+
		"republishes from the outbox table), then start walbox run", err, rec.ConfirmedLSN, r.putRight(err), r.wayOut()))
}

// putRight says how to put the cause of the stop err right.
func (r *Relay) putRight(err error) string {
	switch {
	case errors.Is(err, decoder.ErrSchemaDrift):
		return "Give the outbox table the columns its mapping names again (rename the column back), or map the new names"
	case errors.Is(err, ErrNoPublication) && r.cfg.Shards == 0:
		tables := make([]string, len(r.cfg.Mappings))
		for i, m := range r.cfg.Mappings {
			tables[i] = m.Table.Quoted()
		}
		return fmt.Sprintf("Create the publication again (CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert'))",
			quoteIdent(r.cfg.Publication), strings.Join(tables, ", "))
	case errors.Is(err, ErrNoPublication):
		return fmt.Sprintf("Create publication %q again, with its shard's row filter: run `walbox migrate --shards %d`",
			r.cfg.Publication, r.cfg.Shards)
	}
	return fmt.Sprintf("Make publication %q publish the inserts of every outbox table again", r.cfg.Publication)
}

// stopError describes a recorded stop: where, when and why walbox stopped.
// It adds the way out: WayOut, or ShardWayOut for a shard's slot.
func stopError(slot string, s registry.Stop, wayOut string) error {
	return fmt.Errorf("%w: slot %s stopped at %s (%s): %s. Only walbox recover gets past it: put the cause right, "+
		"then run `%s` (add --dry-run first to count the rows it republishes), then start walbox run",
		errStopped, slot, s.LSN, s.At.UTC().Format(time.RFC3339), s.Reason, wayOut)
}
