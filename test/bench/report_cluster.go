package bench

import (
	"fmt"
	"io"
	"time"
)

// clusterTable writes, for a run on a cluster, how the contenders reach the nodes and each one's
// figures beside the one-publisher ceiling's: drain throughput as a share of it, steady latency as
// a multiple of it.
func (rep *Report) clusterTable(w io.Writer) {
	if rep.Nodes <= 1 || len(rep.Results) == 0 {
		return
	}
	fmt.Fprintf(w, "## A RabbitMQ cluster of %d nodes\n\n"+
		"Every node runs on this machine. The queue is a quorum queue (a member on every node), declared and "+
		"consumed on node 1, which leads it. *ceiling* is one publisher on node 1; *%s* are %d, one per node, "+
		"each with its own connection, channel and window of %d; walbox gets every node in `--amqp-url` "+
		"(its session, or each lane in turn, connects to the next node, node 1 first) and declares its "+
		"alternate and park queues as quorum queues. Broker CPU in the tables below is every node's VM "+
		"together. Ratios are to the one-publisher ceiling of the same scenario: throughput as a share of "+
		"its rate, latency as a multiple of its latency.\n\n",
		rep.Nodes, Ceiling3, Ceiling3.connections(), rep.Window)
	fmt.Fprintln(w, "| scenario | contender | connections | msg/s | vs ceiling | commit → consumer p50 | vs ceiling | p99 | vs ceiling |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range rep.Results {
		c, ok := rep.find(r.Scenario.Name, Ceiling)
		tput, p50, p99 := "–", "–", "–"
		if r.Scenario.Kind == Drain {
			tput = rep.vsCeiling(r)
		} else if ok && r.Err == "" && r.Latency != nil && c.Latency != nil {
			p50, p99 = times(r.Latency.P50, c.Latency.P50), times(r.Latency.P99, c.Latency.P99)
		}
		l := orNone(r.Latency)
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s | %s | %s |\n", r.Scenario.Name, r.Contender,
			r.Contender.connections(), rate(r), tput, ms(l.P50), p50, ms(l.P99), p99)
	}
	fmt.Fprintln(w)
}

// times writes d as a multiple of base.
func times(d, base time.Duration) string {
	if d < 0 || base <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", float64(d)/float64(base))
}

// contenders returns the contenders of the results, in the order of AllContenders and then
// ClusterContenders.
func (rep *Report) contenders() []Contender {
	ran := map[Contender]bool{}
	for _, r := range rep.Results {
		ran[r.Contender] = true
	}
	var out []Contender
	for _, who := range append(append([]Contender{WalboxBaseline}, AllContenders...), ClusterContenders...) {
		if ran[who] {
			out = append(out, who)
			ran[who] = false
		}
	}
	return out
}
