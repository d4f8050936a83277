package status

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/shard"
)

// Set is one set of shards in `walbox status`.
type Set struct {
	Shards int `json:"shards"`
	// Role is "retiring" or "replacing" while walbox reshard moves between two sets, else empty.
	Role string `json:"role,omitempty"`
	// Cut is the newer set's consistent point: every old slot must confirm past it before the
	// old relays stop.
	Cut   string  `json:"cut,omitempty"`
	Slots []Shard `json:"slots"`
}

// Shard is one shard's slot.
type Shard struct {
	Shard       int    `json:"shard"`
	Publication string `json:"publication"`
	Report
	// PassedCut, for a retiring set's slot, says whether it confirmed past the cut.
	PassedCut *bool `json:"passed_cut,omitempty"`
}

// readShards fills in r.Shards when shards publish the outbox table. A single slot alone is shown
// as before. It notes what makes the status fail: a shard slot missing or lost. The slots are read
// through slotDB, where they are: on the standby of --replication-url, if any.
func (r *Report) readShards(ctx context.Context, conn, slotDB *pgx.Conn, layout shard.Layout) error {
	ns := layout.Counts()
	if len(ns) == 0 || (len(ns) == 1 && ns[0] == 1) {
		return nil
	}
	sets, err := shard.ReadStates(ctx, conn, slotDB, layout)
	if err != nil {
		return err
	}
	m, moving, err := shard.FindMove(sets)
	if err != nil {
		return err
	}
	if err := layout.Check(); err != nil {
		r.problems = append(r.problems, err.Error())
	}
	for i := range sets {
		set := &sets[i]
		ss := Set{Shards: set.Set.N}
		if moving {
			ss.Cut, ss.Role = m.Cut.String(), "replacing"
			if set == m.From {
				ss.Role = "retiring"
			}
		}
		for k, sl := range set.Slots {
			one := Shard{Shard: k, Publication: set.Set.PublicationName(k), Report: fromSlot(sl)}
			if moving && set == m.From {
				passed := m.Passed(k)
				one.PassedCut = &passed
			}
			if rec := set.Records[k]; rec != nil && rec.Stop.Stopped() {
				stop := rec.Stop
				one.Stopped = &Stop{LSN: stop.LSN.String(), At: stop.At, Reason: stop.Reason,
					WayOut: replication.ShardWayOut(sl.Name, one.Publication)}
				r.problems = append(r.problems, fmt.Sprintf("walbox run stopped on slot %s at %s and refuses it until `%s`: %s",
					sl.Name, stop.LSN, one.Stopped.WayOut, stop.Reason))
			}
			retired := moving && set == m.From && !sl.Exists && set.Records[k] == nil
			if retired {
				r.problems = append(r.problems, fmt.Sprintf("slot %s was retired by a walbox reshard --retire stopped midway: "+
					"run walbox reshard --shards %d --retire again", sl.Name, m.To.Set.N))
			} else if !sl.Exists {
				r.problems = append(r.problems, "slot "+sl.Name+" does not exist")
			} else if sl.WALStatus == "lost" {
				r.problems = append(r.problems, "slot "+sl.Name+" is invalidated (wal_status lost)")
			}
			ss.Slots = append(ss.Slots, one)
		}
		r.Shards = append(r.Shards, ss)
	}
	return nil
}
