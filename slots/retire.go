package slots

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/shard"
)

// Retire drops the old set of a reshard (`walbox reshard --retire`) once each of its slots passed
// the cut and none is streaming: first the slots, each with its record, then the publications,
// so that a retire cut short can run again. dropped is told about each slot it drops.
func Retire(ctx context.Context, conn *pgx.Conn, reg *registry.Store, m shard.Move, dropped func(inspect.Slot)) error {
	var refuse []string
	for k, sl := range m.From.Slots {
		switch {
		case !sl.Exists && m.From.Records[k] != nil:
			refuse = append(refuse, fmt.Sprintf("slot %s is missing though recorded (lost? see walbox recover)", sl.Name))
		case !sl.Exists: // dropped by a retire cut short
		case !m.Passed(k):
			refuse = append(refuse, fmt.Sprintf("slot %s is at %s, before the cut %s: keep its relay running", sl.Name, sl.ConfirmedFlush, m.Cut))
		case sl.Active:
			refuse = append(refuse, fmt.Sprintf("slot %s is streaming to pid %d: stop its relay (it passed the cut)", sl.Name, deref(sl.ActivePID)))
		}
	}
	if len(refuse) > 0 {
		return fmt.Errorf("not retiring %s: %s", m.From.Set, strings.Join(refuse, "; "))
	}
	for _, sl := range m.From.Slots {
		if sl.Exists {
			if err := Drop(ctx, conn, sl.Name); err != nil {
				return err
			}
			dropped(sl)
		}
		if err := reg.Forget(ctx, sl.Name); err != nil {
			return err
		}
	}
	return shard.DropPublications(ctx, conn, m.From.Set)
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}
