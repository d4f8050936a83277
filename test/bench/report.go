package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Markdown writes the report as markdown: the machine, the command, one table per scenario kind,
// the hot path, the targets and any failures.
func (rep *Report) Markdown(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	m := rep.Machine
	p("# walbox benchmark results\n\n")
	p("Run %s, %s. Load average (1 min): %.2f at the start, %.2f at the end.\n\n",
		rep.Started.UTC().Format("2006-01-02 15:04 MST"), rep.Finished.Sub(rep.Started).Round(time.Second), rep.LoadStart, rep.LoadEnd)
	p("Machine: %d CPUs (%s), %s memory, Linux %s; %s, PostgreSQL %s, %s.\n\n",
		m.CPUs, m.CPUModel, mib(m.Memory), m.Kernel, m.Go, m.Postgres, m.RabbitMQ)
	if rep.Command != "" {
		p("Command: `%s`\n\n", rep.Command)
	}
	p("Settings: walbox and ceiling window %d; polling batch %d; %d producer connections; PostgreSQL fsync=off, "+
		"full_page_writes=on, a CHECKPOINT before each trial, autovacuum off on the bench tables; persistent messages, "+
		"mandatory, one consumer (no-ack) on the queue.\n\n", rep.Window, rep.PollBatch, rep.Producers)
	if rep.Chart != "" {
		p("![throughput and latency](%s)\n\n", rep.Chart)
	}
	if rep.Profiled {
		p("**Profiled run**: walbox ran in-process under pprof, not as the real binary; its figures are not walbox's.\n\n")
	}
	rep.clusterTable(w)
	rep.drainTable(w)
	rep.steadyTable(w)
	rep.splitTable(w)
	rep.hotPathTable(w)
	if rep.Nodes <= 1 {
		rep.targetTable(w)
	}
	rep.failures(w)
}

func (rep *Report) drainTable(w io.Writer) {
	rows := rep.results(Drain)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "## Drain a committed backlog\n\n"+
		"Throughput is messages over the time from the first to the last delivery to the consumer (walbox stream: from the first to the last confirm walbox received, when the stream holds every message). Restarts are "+
		"walbox sessions that ended in an error and started again from the slot; dups are messages the consumer "+
		"received twice as a result. CPU is "+
		"seconds in that run (relay process; all PostgreSQL processes; the broker's VM). WAL is bytes per message: "+
		"written by the producer's inserts, added by the relay, and (polling) by the VACUUM of its dead tuples afterwards.\n\n")
	fmt.Fprintln(w, "| scenario | contender | messages | msg/s | vs ceiling | restarts / dups | relay CPU s | relay µs/msg | PG CPU s | broker CPU s | broker µs/msg | relay peak RSS | WAL B/msg inserts | WAL B/msg relay | WAL B/msg vacuum |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %d / %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.Scenario.Name, r.Contender, r.Messages, rate(r), rep.vsCeiling(r), r.Restarts, r.Duplicates, secs(r.RelayCPU),
			us(r.CPUPerMessage()), secs(r.PGCPU), secs(r.BrokerCPU), us(r.BrokerCPUPerMessage()), mib(r.RelayRSS), walBytes(r.WALInsert),
			walBytes(r.WALRelay), walBytes(r.WALVacuum))
	}
	fmt.Fprintln(w)
}

func (rep *Report) steadyTable(w io.Writer) {
	rows := rep.results(Steady)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "## Steady producer\n\n"+
		"Rows are committed as single-row transactions at a fixed rate. *Commit → consumer* runs from the producer "+
		"seeing its COMMIT return to the consumer receiving the message (for the ceiling, from the publish call): "+
		"exact, over every message. *Commit → confirm* runs to the broker's confirm: for walbox from its own "+
		"`walbox_commit_to_confirm_seconds` histogram (the commit timestamp of the transaction's Begin message; "+
		"≈: interpolated within power-of-two buckets), for the polling relay from the row's created_at (the "+
		"start of its single-row transaction), for the ceiling from the publish call. *Commit → publish* is the "+
		"part of walbox's before its publish, from its `walbox_commit_to_publish_seconds` histogram (≈): the server "+
		"decoding and sending the transaction, walbox reading it, and any wait for its window; *commit → read* "+
		"(`walbox_commit_to_read_seconds`) is its first part, to walbox's reader reading the row from the "+
		"replication connection: the server's decoding and sending. The window follows a "+
		"warm-up of %d rows.\n\n"+
		"In the *pgbench* scenarios the rows come from PostgreSQL's pgbench, a process of its own with one connection "+
		"per producer, whose rate limit schedules transactions at random intervals of the same mean. Their latency "+
		"runs from the row's insert (clock_timestamp() written into its body, in the same single-statement "+
		"transaction as its commit) to the consumer: *insert → consumer* in the consumer columns. Producer rows/s "+
		"is then pgbench's achieved rate and *load lag* how late pgbench started its transactions against its "+
		"schedule, so that a late load tells itself apart from a slow relay.\n\n", warmupRows)
	fmt.Fprintln(w, "| scenario | contender | messages | producer rows/s | load lag p50 / p99 / max | restarts / dups | commit → consumer p50 | p99 | p99.9 | max | commit → confirm p50 | p99 | p99.9 | commit → publish p50 | p99 | commit → read p50 | p99 |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range rows {
		l, c, pub, rd := orNone(r.Latency), orNone(r.Confirm), orNone(r.Publish), orNone(r.Read)
		prod := "–"
		if r.ProducerRate > 0 {
			prod = fmt.Sprintf("%.0f", r.ProducerRate)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %d / %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.Scenario.Name, r.Contender, r.Messages, prod, loadLag(r.LoadLag), r.Restarts, r.Duplicates,
			ms(l.P50), ms(l.P99), ms(l.P999), ms(l.Max), approx(c, c.P50), approx(c, c.P99), approx(c, c.P999),
			approx(pub, pub.P50), approx(pub, pub.P99), approx(rd, rd.P50), approx(rd, rd.P99))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Cost of the steady runs, over the measured window. The producer's inserts are the same for every "+
		"contender and are counted in the PostgreSQL CPU.\n\n")
	fmt.Fprintln(w, "| scenario | contender | relay CPU s | relay µs/msg | PG CPU s | broker CPU s | broker µs/msg | relay peak RSS | WAL B/msg inserts | WAL B/msg relay | WAL B/msg vacuum |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.Scenario.Name, r.Contender, secs(r.RelayCPU), us(r.CPUPerMessage()), secs(r.PGCPU), secs(r.BrokerCPU),
			us(r.BrokerCPUPerMessage()), mib(r.RelayRSS), walBytes(r.WALInsert), walBytes(r.WALRelay), walBytes(r.WALVacuum))
	}
	fmt.Fprintln(w)
}

// splitTable splits each steady median of walbox and the bare publishers into the legs of a
// message's way, as differences of medians: the server to walbox's read, the read to the publish
// call, the call to the socket write that carried the message, that write to the broker's confirm,
// and that write to the consumer.
func (rep *Report) splitTable(w io.Writer) {
	var rows []Result
	for _, r := range rep.results(Steady) {
		if r.Err == "" && r.Latency != nil && !r.Contender.polls() {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "## Where the median goes\n\n"+
		"Each leg is the difference of two medians (p50). Server → read, read → publish call, publish call → "+
		"socket write and socket write → consumer add up to the commit → consumer p50; socket write → confirm "+
		"runs beside the last (the broker may deliver before it confirms). "+
		"walbox's come from its histograms (≈, interpolated; the clock starts at the commit timestamp of the "+
		"transaction's Begin message): `walbox_commit_to_read_seconds`, `…_to_publish_seconds`, `…_to_write_seconds` "+
		"(the socket write that carried the message's last frame) and `…_to_confirm_seconds`. For the bare "+
		"publishers the clock starts at the publish call, which writes the frames before it returns. *Held* is "+
		"walbox's `walbox_publish_to_write_seconds` p50: the publisher's hold, measured directly. *Writes/msg* is the "+
		"relay's write system calls per message (/proc/<pid>/io syscw): mostly socket writes to the broker, each of which "+
		"wakes it. – : not measured (no database, no confirms, or a build without the histogram).\n\n")
	fmt.Fprintln(w, "| scenario | contender | server → read | read → publish call | publish call → socket write | socket write → confirm | socket write → consumer | commit → consumer p50 | held p50 | writes/msg | broker µs/msg |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range rows {
		read, pub, write, conf := p50Of(r.Read), p50Of(r.Publish), p50Of(r.Write), p50Of(r.Confirm)
		if r.Contender.isCeiling() {
			read, pub = 0, 0
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Scenario.Name, r.Contender,
			leg(r.Contender.usesDB(), 0, read), leg(r.Contender.usesDB(), read, pub), leg(true, pub, write),
			leg(true, write, conf), leg(true, write, r.Latency.P50), ms(r.Latency.P50), approx(orNone(r.Held), p50Of(r.Held)),
			perMsg(r.WritesPerMessage()), us(r.BrokerCPUPerMessage()))
	}
	fmt.Fprintln(w)
}

// perMsg prints a count per message, or "–".
func perMsg(v float64) string {
	if v < 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

// p50Of returns p's median, or -1.
func p50Of(p *Percentiles) time.Duration {
	if p == nil {
		return -1
	}
	return p.P50
}

// leg prints to - from, signed (a difference of interpolated medians can be negative), or "–"
// when either is unknown or the leg does not apply.
func leg(applies bool, from, to time.Duration) string {
	if !applies || from < 0 || to < 0 {
		return "–"
	}
	d := to - from
	if d < 0 {
		return "−" + ms(-d)
	}
	return ms(d)
}

// loadLag prints the load's schedule lag, or "–" for a load that does not report it.
func loadLag(p *Percentiles) string {
	if p == nil {
		return "–"
	}
	return ms(p.P50) + " / " + ms(p.P99) + " / " + ms(p.Max)
}

// orNone returns p, or percentiles that print as unknown.
func orNone(p *Percentiles) *Percentiles {
	if p == nil {
		return &Percentiles{P50: -1, P99: -1, P999: -1, Max: -1}
	}
	return p
}

// approx prints d, marked as approximate when p is.
func approx(p *Percentiles, d time.Duration) string {
	if p.Approx && d >= 0 {
		return "≈" + ms(d)
	}
	return ms(d)
}

func (rep *Report) failures(w io.Writer) {
	var failed []Result
	for _, r := range rep.Results {
		if r.Err != "" {
			failed = append(failed, r)
		}
	}
	if len(failed) == 0 {
		return
	}
	fmt.Fprintf(w, "## Failed trials\n\n")
	for _, r := range failed {
		fmt.Fprintf(w, "- %s / %s: %s\n", r.Scenario.Name, r.Contender, strings.ReplaceAll(firstLine(r.Err), "|", "/"))
	}
	fmt.Fprintln(w)
}

// results returns the successful and failed results of kind, in run order.
func (rep *Report) results(kind Kind) []Result {
	var out []Result
	for _, r := range rep.Results {
		if r.Scenario.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// find returns the result of who in the scenario named name, if it succeeded.
func (rep *Report) find(name string, who Contender) (Result, bool) {
	for _, r := range rep.Results {
		if r.Scenario.Name == name && r.Contender == who && r.Err == "" {
			return r, true
		}
	}
	return Result{}, false
}

// ranBefore reports whether contender a ran before contender b in the scenario name.
func (rep *Report) ranBefore(name string, a, b Contender) bool {
	for _, r := range rep.Results {
		if r.Scenario.Name == name && (r.Contender == a || r.Contender == b) {
			return r.Contender == a
		}
	}
	return false
}

func (rep *Report) vsCeiling(r Result) string {
	c, ok := rep.find(r.Scenario.Name, Ceiling)
	if !ok || r.Err != "" || c.Throughput == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f%%", 100*r.Throughput/c.Throughput)
}

func rate(r Result) string {
	if r.Err != "" {
		return "failed"
	}
	return fmt.Sprintf("%.0f", r.Throughput)
}

func ms(d time.Duration) string {
	switch {
	case d < 0:
		return "–"
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func secs(s float64) string {
	if s < 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", s)
}

func us(v float64) string {
	if v < 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", v)
}

func mib(b int64) string {
	if b < 0 {
		return "–"
	}
	if b >= 10<<30 {
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

func walBytes(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.0f", v)
}
