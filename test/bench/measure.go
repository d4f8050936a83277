package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Result is one contender's figures in one scenario. Unknown figures are -1 (NaN for WAL).
type Result struct {
	Scenario  Scenario
	Contender Contender

	Messages   int          // measured messages
	Seconds    float64      // from the first to the last delivery
	Throughput float64      // messages per second over Seconds
	Latency    *Percentiles // steady: commit (publish; pgbench load: insert) to consumer
	// Confirm (steady) is commit to broker confirm: from walbox's own histogram (approximate), the
	// polling relay's created_at, or the ceiling's publish call.
	Confirm *Percentiles
	// Publish (steady, walbox) is the part of Confirm before the broker: commit to publish, from
	// walbox's histogram (approximate); nil for other contenders and builds without it.
	Publish *Percentiles
	// Read (steady, walbox) is the part of Publish before walbox: commit to walbox's reader
	// reading the row, the server's decoding and sending (approximate); nil as Publish.
	Read *Percentiles
	// Write (steady) runs to the socket write that carried the message: for walbox from the commit
	// to its last frame's write (approximate; nil for builds without the histogram), for the
	// ceiling from the publish call to its return (amqp091 writes the frames within the call).
	Write *Percentiles
	// Held (steady, walbox) is from the publish call to that write: the publisher's hold (approximate).
	Held *Percentiles
	// ProducerRate is the rate at which a steady producer's commits actually went (rows/s).
	ProducerRate float64
	// LoadLag (pgbench load) is how late pgbench started each transaction against its schedule.
	LoadLag *Percentiles

	RelayCPU  float64 // CPU seconds of the relay process in the measured window
	PGCPU     float64 // of every PostgreSQL process
	BrokerCPU float64 // of the broker's Erlang VM
	RelayRSS  int64   // the relay's peak RSS (VmHWM), bytes
	// RelayWrites (steady) is the relay's write system calls in the measured window, -1 if
	// unknown: mostly its socket writes to the broker, so per message it shows how many messages
	// share a write (each write wakes the broker).
	RelayWrites int64

	WALInsert float64 // WAL bytes per message written by the producer's inserts
	WALRelay  float64 // WAL bytes per message the relay added
	WALVacuum float64 // polling: WAL bytes per message of the VACUUM its dead tuples need

	Duplicates int // messages the consumer received more than once
	Restarts   int // walbox sessions that ended in an error and started again from the slot
	Err        string
}

func newResult(sc Scenario, who Contender) Result {
	return Result{Scenario: sc, Contender: who, Messages: sc.messages(), RelayCPU: -1, PGCPU: -1, BrokerCPU: -1,
		RelayRSS: -1, RelayWrites: -1, WALInsert: math.NaN(), WALRelay: math.NaN(), WALVacuum: math.NaN()}
}

// CPUPerMessage returns the relay's CPU microseconds per message, or -1.
func (r Result) CPUPerMessage() float64 {
	if r.RelayCPU < 0 || r.Messages == 0 {
		return -1
	}
	return r.RelayCPU / float64(r.Messages) * 1e6
}

// WritesPerMessage returns the relay's write system calls per message, or -1.
func (r Result) WritesPerMessage() float64 {
	if r.RelayWrites < 0 || r.Messages == 0 {
		return -1
	}
	return float64(r.RelayWrites) / float64(r.Messages)
}

// BrokerCPUPerMessage returns the broker's CPU microseconds per message, or -1 if unknown.
func (r Result) BrokerCPUPerMessage() float64 {
	if r.BrokerCPU < 0 || r.Messages == 0 {
		return -1
	}
	return r.BrokerCPU / float64(r.Messages) * 1e6
}

// trial runs one contender in one scenario; a failure is recorded in the result.
func (b *bencher) trial(ctx context.Context, sc Scenario, who Contender) Result {
	r := newResult(sc, who)
	t, err := b.setup(ctx, sc, who)
	if err == nil {
		if sc.Kind == Steady {
			err = t.steady(ctx, &r)
		} else {
			err = t.drain(ctx, &r)
		}
	}
	t.teardown()
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

// drain commits the backlog, then relays it with a consumer attached.
func (t *trial) drain(ctx context.Context, r *Result) error {
	sc := t.sc
	var relayStart int64
	if t.who.usesDB() {
		var err error
		if relayStart, err = t.backlog(ctx, r, sc.Rows, sc.TxSize); err != nil {
			return err
		}
	}
	cons, err := t.consume(sc.Rows)
	if err != nil {
		return err
	}
	defer cons.stop()
	before := t.b.usage(0)
	relay, err := t.startRelay(sc.Rows, 0, -1)
	if err != nil {
		return err
	}
	defer relay.kill()
	if t.who == WalboxStream {
		// Into a stream, the drain is timed at walbox's confirms: a confirmed message is stored
		// in the stream, and how fast a reader then reads it is the reader's own matter.
		started := time.Now()
		secs, rate, err := t.confirmSpan(ctx, sc.Rows, started, relay.alive)
		t.finish(r, relay, before)
		if err := errors.Join(err, relay.stop(stopTimeout)); err != nil {
			return err
		}
		r.Seconds, r.Throughput = secs, rate
		return t.relayWAL(ctx, r, relayStart, sc.Rows, sc.Rows)
	}
	waitErr := cons.wait(ctx, sc.Rows, stallTimeout, relay.alive)
	t.finish(r, relay, before)
	if err := errors.Join(waitErr, relay.stop(stopTimeout)); err != nil {
		return err
	}
	cons.stop()
	r.Seconds, r.Throughput = span(cons.arrivals)
	r.Duplicates = int(cons.dups.Load())
	return t.relayWAL(ctx, r, relayStart, sc.Rows, sc.Rows)
}

// confirmSpan polls walbox's /status, every 2 ms, until it has confirmed n messages. It returns
// the seconds from the first poll that saw a confirm to the poll that saw the n-th, and the rate
// of the confirms between those two polls. Should one poll see them all, it counts from started
// instead. It gives up as consumer.wait does.
func (t *trial) confirmSpan(ctx context.Context, n int, started time.Time, alive func() error) (seconds, rate float64, err error) {
	statusURL := strings.TrimSuffix(t.metricsURL, "/metrics") + "/status"
	var (
		first      time.Time // the first poll that saw a confirm
		atFirst    uint64    // the confirms it saw
		seen       uint64
		lastChange = time.Now()
	)
	for {
		var st struct {
			Confirmed uint64 `json:"confirmed"`
		}
		if err := getJSON(ctx, statusURL, &st); err == nil {
			now := time.Now()
			if st.Confirmed > 0 && first.IsZero() {
				first, atFirst = now, st.Confirmed
			}
			if st.Confirmed >= uint64(n) {
				if atFirst >= uint64(n) {
					first, atFirst = started, 0
				}
				seconds = now.Sub(first).Seconds()
				return seconds, float64(uint64(n)-atFirst) / seconds, nil
			}
			if st.Confirmed != seen {
				seen, lastChange = st.Confirmed, now
			}
		}
		if time.Since(lastChange) > stallTimeout {
			return 0, 0, fmt.Errorf("%d of %d messages confirmed after %v without progress", seen, n, stallTimeout)
		}
		if err := alive(); err != nil {
			return 0, 0, fmt.Errorf("%d of %d messages confirmed: %w", seen, n, err)
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// backlog commits rows in transactions of txSize, measures their WAL and vacuums the table,
// returning the WAL position after that.
func (t *trial) backlog(ctx context.Context, r *Result, rows, txSize int) (int64, error) {
	prod, err := newProducer(ctx, t.dbURL, t.table, t.b.cfg.Producers, t.sc.Payload)
	if err != nil {
		return 0, err
	}
	defer prod.close()
	lsn0, err := t.lsn(ctx)
	if err != nil {
		return 0, err
	}
	if err := prod.backlog(ctx, 0, rows, txSize); err != nil {
		return 0, fmt.Errorf("commit backlog: %w", err)
	}
	lsn1, err := t.lsn(ctx)
	if err != nil {
		return 0, err
	}
	r.WALInsert = float64(lsn1-lsn0) / float64(rows)
	if err := t.vacuum(ctx); err != nil {
		return 0, err
	}
	return t.lsn(ctx)
}

// finish reads the relay's CPU time and peak RSS while it still runs, and the servers' CPU time.
func (t *trial) finish(r *Result, relay *process, before usage) {
	after := t.b.usage(relay.pid())
	r.RelayCPU, r.PGCPU, r.BrokerCPU = after.since(before)
	r.RelayRSS = peakRSS(relay.pid())
	r.Restarts = relay.count(`"session ended`)
}

// relayWAL records the WAL the relay wrote since from (over messages), and for the polling
// relay the WAL of the VACUUM its dead tuples (one per row relayed) need.
func (t *trial) relayWAL(ctx context.Context, r *Result, from int64, messages, rows int) error {
	if !t.who.usesDB() {
		return nil
	}
	end, err := t.lsn(ctx)
	if err != nil {
		return err
	}
	r.WALRelay = float64(end-from) / float64(messages)
	if !t.who.polls() {
		return nil
	}
	if err := execSQL(ctx, t.dbURL, "VACUUM "+t.table); err != nil {
		return err
	}
	after, err := t.lsn(ctx)
	if err != nil {
		return err
	}
	r.WALVacuum = float64(after-end) / float64(rows)
	return nil
}

// steady relays rows committed at the scenario's rate and measures each one's latency.
func (t *trial) steady(ctx context.Context, r *Result) error {
	sc, n, warm := t.sc, t.sc.messages(), 0
	var prod *producer
	if t.who.usesDB() {
		if sc.Load == InProcess {
			var err error
			if prod, err = newProducer(ctx, t.dbURL, t.table, t.b.cfg.Producers, sc.Payload); err != nil {
				return err
			}
			defer prod.close()
		}
		warm = warmupRows
		if _, err := t.backlog(ctx, r, warm, 1); err != nil {
			return err
		}
	}
	cons, err := consume(t.b.srv.AMQPURL, t.topo.queue, warm+n)
	if err != nil {
		return err
	}
	defer cons.stop()
	relay, err := t.startRelay(n, sc.Rate, warm)
	if err != nil {
		return err
	}
	defer relay.kill()
	if err := cons.wait(ctx, warm, stallTimeout, relay.alive); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	return t.window(ctx, r, prod, cons, relay, warm)
}

// window is the measured part of a steady run.
func (t *trial) window(ctx context.Context, r *Result, prod *producer, cons *consumer, relay *process, warm int) error {
	n := t.sc.messages()
	before := t.b.usage(relay.pid())
	hist0, histErr := t.histograms(ctx)
	var from int64
	var commits []int64
	var err error
	if t.who.usesDB() {
		if from, err = t.lsn(ctx); err != nil {
			return err
		}
		if commits, err = t.load(ctx, r, prod, warm, n); err != nil {
			return err
		}
	}
	waitErr := cons.wait(ctx, warm+n, stallTimeout, relay.alive)
	t.finish(r, relay, before)
	if w0, w1 := before.writes, writeCalls(relay.pid()); w0 >= 0 && w1 >= 0 {
		r.RelayWrites = w1 - w0
	}
	if hist1, err := t.histograms(ctx); err == nil && histErr == nil && hist1[0] != nil {
		r.Confirm = hist1[0].minus(hist0[0]).percentiles()
		for i, dst := range []**Percentiles{&r.Publish, &r.Read, &r.Write, &r.Held} {
			if h0, h1 := hist0[i+1], hist1[i+1]; len(h0) > 0 && len(h1) > 0 {
				*dst = h1.minus(h0).percentiles()
			}
		}
	}
	if err := errors.Join(waitErr, relay.stop(stopTimeout)); err != nil {
		return err
	}
	if t.resultFile != "" {
		if res, err := readResult(t.resultFile); err == nil {
			r.Confirm, r.Write = res.Confirm, res.Write
		}
	}
	cons.stop()
	arrivals := cons.arrivals[warm:]
	r.Seconds, r.Throughput = span(arrivals)
	r.Duplicates = int(cons.dups.Load())
	if commits == nil {
		commits = cons.sent[warm:] // the ceiling's send times, or the insert times of pgbench's rows
	}
	r.Latency = latencies(commits, arrivals)
	if err := t.relayWAL(ctx, r, from, n, warm+n); err != nil {
		return err
	}
	// The window's WAL holds the inserts too; the warm-up measured them alone.
	r.WALRelay -= r.WALInsert
	return nil
}

// load commits the window's rows, seq warm to warm+n-1: from prod on its fixed schedule,
// returning each row's commit time, or through pgbench, whose rows carry their insert time.
func (t *trial) load(ctx context.Context, r *Result, prod *producer, warm, n int) ([]int64, error) {
	if t.sc.Load == Pgbench {
		return nil, t.pgbench(ctx, r, n)
	}
	commits, err := prod.steady(ctx, warm, n, t.sc.Rate)
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	_, r.ProducerRate = span(commits)
	return commits, nil
}

// histograms scrapes walbox's commit-to-confirm, commit-to-publish, commit-to-read,
// commit-to-write and publish-to-write histograms once nothing is in flight; nil for other
// contenders. A build without any but the first gives them empty.
func (t *trial) histograms(ctx context.Context) ([5]histogram, error) {
	var hs [5]histogram
	if t.metricsURL == "" {
		return hs, nil
	}
	settle(ctx, strings.TrimSuffix(t.metricsURL, "/metrics")+"/status")
	got, err := scrape(ctx, t.metricsURL, commitHistogram, publishHistogram, readHistogram, writeHistogram, heldHistogram)
	if err != nil {
		return hs, err
	}
	copy(hs[:], got) // nil where an older build lacks them
	return hs, nil
}

// span returns the seconds from the earliest to the latest of times (Unix nanoseconds; zeros
// ignored) and the rate of events over them.
func span(times []int64) (seconds, rate float64) {
	lo, hi, n := int64(math.MaxInt64), int64(0), 0
	for _, v := range times {
		if v == 0 {
			continue
		}
		lo, hi, n = min(lo, v), max(hi, v), n+1
	}
	if n < 2 {
		return 0, 0
	}
	seconds = time.Duration(hi - lo).Seconds()
	return seconds, float64(n-1) / seconds
}
