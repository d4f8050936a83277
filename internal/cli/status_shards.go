package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/walbox/walbox/internal/status"
)

func printShards(w io.Writer, sets []status.Set) {
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
