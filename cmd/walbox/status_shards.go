package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/inspect"
)

// setStatus is one set of shards in `walbox status`.
type setStatus struct {
	Shards int `json:"shards"`
	// Role is "retiring" or "replacing" while walbox reshard moves between two sets, else empty.
	Role string `json:"role,omitempty"`
	// Cut is the newer set's consistent point: every old slot must confirm past it before the
	// old relays stop.
	Cut   string        `json:"cut,omitempty"`
	Slots []shardStatus `json:"slots"`
}

// shardStatus is one shard's slot.
type shardStatus struct {
	Shard       int    `json:"shard"`
	Publication string `json:"publication"`
	slotStatus
	// PassedCut, for a retiring set's slot, says whether it confirmed past the cut.
	PassedCut *bool `json:"passed_cut,omitempty"`
}

// readShardStatus fills in st.Shards when shards publish the outbox table (a single slot alone
// is shown as before) and returns what makes the status fail: a shard slot missing or lost.
func readShardStatus(ctx context.Context, conn *pgx.Conn, c *common, st *slotStatus) (string, error) {
	layout, err := readLayout(ctx, conn, c)
	if err != nil {
		return "", err
	}
	ns := layout.Counts()
	if len(ns) == 0 || (len(ns) == 1 && ns[0] == 1) {
		return "", nil
	}
	sets, err := readSets(ctx, conn, layout)
	if err != nil {
		return "", err
	}
	m, moving, err := findMove(sets)
	if err != nil {
		return "", err
	}
	var problems []string
	if err := layout.Check(); err != nil {
		problems = append(problems, err.Error())
	}
	for i := range sets {
		set := &sets[i]
		ss := setStatus{Shards: set.set.N}
		if moving {
			ss.Cut = m.cut.String()
			ss.Role = "replacing"
			if set == m.from {
				ss.Role = "retiring"
			}
		}
		for k, sl := range set.slots {
			one := shardStatus{Shard: k, Publication: set.set.PublicationName(k), slotStatus: slotFromInspect(sl)}
			if moving && set == m.from {
				passed := m.passed(k)
				one.PassedCut = &passed
			}
			if !sl.Exists {
				problems = append(problems, "slot "+sl.Name+" does not exist")
			} else if sl.WALStatus == "lost" {
				problems = append(problems, "slot "+sl.Name+" is invalidated (wal_status lost)")
			}
			ss.Slots = append(ss.Slots, one)
		}
		st.Shards = append(st.Shards, ss)
	}
	return strings.Join(problems, "; "), nil
}

func slotFromInspect(sl inspect.Slot) slotStatus {
	st := slotStatus{Slot: sl.Name, CurrentWALLSN: sl.CurrentWAL.String()}
	if !sl.Exists {
		return st
	}
	st.Exists, st.Plugin, st.Active, st.ActivePID = true, sl.Plugin, sl.Active, sl.ActivePID
	st.ConfirmedFlushLSN, st.RestartLSN = sl.ConfirmedFlush.String(), sl.Restart.String()
	st.LagBytes, st.RetainedWALBytes = sl.LagBytes, sl.RetainedBytes
	if sl.WALStatus != "" {
		st.WALStatus = &sl.WALStatus
	}
	return st
}

func printShards(w io.Writer, sets []setStatus) {
	for _, set := range sets {
		fmt.Fprintf(w, "\nshards %d", set.Shards)
		if set.Role != "" {
			fmt.Fprintf(w, " (%s; cut %s)", set.Role, set.Cut)
		}
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  shard\tslot\tpublication\tactive_pid\tconfirmed_flush_lsn\tlag_bytes\twal_status\tpassed_cut")
		for _, s := range set.Slots {
			if !s.Exists {
				fmt.Fprintf(tw, "  %d\t%s (missing)\t%s\t-\t-\t-\t-\t-\n", s.Shard, s.Slot, s.Publication)
				continue
			}
			pid := "-"
			if s.ActivePID != nil {
				pid = fmt.Sprint(*s.ActivePID)
			}
			passed := "-"
			if s.PassedCut != nil {
				passed = fmt.Sprint(*s.PassedCut)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Shard, s.Slot, s.Publication, pid, s.ConfirmedFlushLSN,
				optInt(s.LagBytes), optString(s.WALStatus), passed)
		}
		tw.Flush()
	}
}
