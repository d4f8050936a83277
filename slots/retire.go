package slots

import (
	"context"
	"fmt"
	"strings"

	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/shard"
)

// Retire drops the old set of a reshard, as `walbox reshard --retire` asks. Each of its slots must
// have passed the cut by walbox's record of it (shard.Move.Passed). None may be streaming. It drops
// first the slots, each with its record, then the publications. So a retire stopped midway can run
// again. It compares each slot with its record first, as walbox run would. It refuses the whole set
// if one does not match. The record of a slot recreated or advanced behind walbox's back is the
// evidence of a gap. So is the record of a slot recorded on another server, and it stays. The
// function dropped is told about each slot it drops.
func Retire(ctx context.Context, c ReshardConfig, m shard.Move, dropped func(inspect.Slot)) error {
	system, err := inspect.SystemID(ctx, c.Conn)
	if err != nil {
		return err
	}
	var refuse []string
	for k, sl := range m.From.Slots {
		if why := retireRefusal(m, k, system); why != "" {
			refuse = append(refuse, why)
		} else if sl.Active {
			refuse = append(refuse, fmt.Sprintf("slot %s is streaming to pid %d: stop its relay (it passed the cut)", sl.Name, deref(sl.ActivePID)))
		}
	}
	for k := range m.From.Set.N {
		// A publication that carries other tables stays: dropping it would leave them to no relay.
		pub := m.From.Set.PublicationName(k)
		others, err := othersOf(ctx, c.Conn, pub, c.Table)
		if err != nil {
			return err
		}
		if len(others) > 0 {
			refuse = append(refuse, fmt.Sprintf("publication %s also publishes %s, which no shard relays: relay them with a "+
				"publication and slot of their own first, then remove them from %s", pub, strings.Join(others, ", "), pub))
		}
	}
	if len(refuse) > 0 {
		return fmt.Errorf("not retiring %s: %s", m.From.Set, strings.Join(refuse, "; "))
	}
	reg := registry.New(c.Conn, c.Table.Schema)
	for _, sl := range m.From.Slots {
		if sl.Exists {
			if err := Drop(ctx, c.slotDB(), sl.Name); err != nil {
				return err
			}
			dropped(sl)
			killpoint.Hit("retire.dropped")
		}
		if err := reg.Forget(ctx, sl.Name); err != nil {
			return err
		}
		killpoint.Hit("retire.forgot")
	}
	return shard.DropPublications(ctx, c.Conn, m.From.Set)
}

// retireRefusal says why slot k of the old set may not be retired, or "".
func retireRefusal(m shard.Move, k int, system string) string {
	sl, rec := m.From.Slots[k], m.From.Records[k]
	switch {
	case rec == nil && !sl.Exists:
		return "" // dropped and forgotten by a retire stopped midway
	case rec == nil:
		return fmt.Sprintf("slot %s has no record, so nothing tells what walbox confirmed on it", sl.Name)
	case rec.SystemID != system:
		return fmt.Sprintf("slot %s was recorded on the server with system identifier %s, not this one (%s): run `walbox recover` for it",
			sl.Name, rec.SystemID, system)
	case sl.Exists && sl.ConfirmedFlush > rec.ConfirmedLSN:
		return fmt.Sprintf("slot %s is at %s, ahead of %s, the last position walbox recorded: it was recreated or advanced behind "+
			"walbox's back, and rows before the cut may never have been delivered; its record stays. Run `walbox recover` for it",
			sl.Name, sl.ConfirmedFlush, rec.ConfirmedLSN)
	case rec.Stop.Stopped():
		return fmt.Sprintf("walbox run stopped on slot %s at %s (%s): run `walbox recover` for it", sl.Name, rec.Stop.LSN, rec.Stop.Reason)
	case !sl.Exists && !m.Passed(k):
		return fmt.Sprintf("slot %s is missing though recorded at %s, before the cut %s (lost? see walbox recover)", sl.Name, rec.ConfirmedLSN, m.Cut)
	case !m.Passed(k):
		return fmt.Sprintf("slot %s is at %s by its record, before the cut %s: keep its relay running", sl.Name, rec.ConfirmedLSN, m.Cut)
	}
	return ""
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}
