package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// stallTimeout ends a trial whose consumer has received nothing new for this long.
const stallTimeout = 2 * time.Minute

// stopTimeout bounds a relay's graceful stop.
const stopTimeout = 30 * time.Second

// warmupRows are committed before a steady run: their WAL is the per-row insert baseline, and
// relaying them brings the relay to its steady state before the measured window.
const warmupRows = 500

// bencher runs trials: one contender in one scenario.
type bencher struct {
	cfg   Config
	srv   Servers
	admin *pgx.Conn // superuser connection for WAL positions and checkpoints
	n     int       // trials started
}

// trial is one contender's run of one scenario, with a database, table, exchange and queue of
// its own.
type trial struct {
	b     *bencher
	sc    Scenario
	who   Contender
	name  string // unique: database, slot, exchange and queue
	label string // log file prefix
	dbURL string // "" for the ceiling
	table string
	topo  topology
	// metricsURL is walbox's /metrics; resultFile is where a child reports its confirm latencies.
	metricsURL, resultFile string
}

func (b *bencher) setup(ctx context.Context, sc Scenario, who Contender) (*trial, error) {
	b.n++
	t := &trial{b: b, sc: sc, who: who, name: fmt.Sprintf("bench_%d_%d", os.Getpid(), b.n),
		label: fmt.Sprintf("%02d-%s", b.n, strings.ReplaceAll(string(who), " ", "-"))}
	t.topo = topology{url: b.srv.AMQPURL, exchange: t.name, queue: t.name, queueType: sc.Queue, sinkType: b.srv.sinkType()}
	if err := t.topo.declare(); err != nil {
		return t, err
	}
	if who.usesDB() {
		if err := t.createTable(ctx); err != nil {
			return t, err
		}
	}
	if sc.Load == Pgbench {
		if err := execSQL(ctx, t.dbURL, pgbenchSeqDDL); err != nil {
			return t, fmt.Errorf("pgbench sequence: %w", err)
		}
	}
	if _, err := b.admin.Exec(ctx, "CHECKPOINT"); err != nil {
		return t, fmt.Errorf("checkpoint: %w", err)
	}
	return t, nil
}

// createTable creates the trial's database and the contender's table in it: walbox's through
// `walbox migrate` (table, publication, slot), the polling relay's by hand.
func (t *trial) createTable(ctx context.Context) error {
	var err error
	if t.dbURL, err = createDatabase(ctx, t.b.srv.DatabaseURL, t.name); err != nil {
		return err
	}
	if t.who.polls() {
		t.table = pollTable
		return execSQL(ctx, t.dbURL, pollTableDDL)
	}
	t.table = "outbox"
	p, err := start(t.b.cfg.WorkDir, t.label+"-migrate", t.walboxBin(), t.walboxEnv(), "migrate")
	if err != nil {
		return err
	}
	if err := p.wait(2 * time.Minute); err != nil {
		return fmt.Errorf("walbox migrate: %w", err)
	}
	return execSQL(ctx, t.dbURL, walboxTableSetup)
}

// walboxEnv is walbox's configuration: every node of the broker, and on a cluster quorum queues
// for what it declares itself.
func (t *trial) walboxEnv(extra ...string) []string {
	env := []string{
		"WALBOX_DATABASE_URL=" + t.dbURL,
		"WALBOX_AMQP_URL=" + strings.Join(t.b.srv.brokerURLs(), ","),
		"WALBOX_SLOT=" + t.name,
		"WALBOX_EXCHANGE=" + t.name,
		"WALBOX_WINDOW=" + strconv.Itoa(t.b.cfg.Window),
		"WALBOX_LOG_FORMAT=json",
	}
	if t.b.srv.cluster() {
		env = append(env, "WALBOX_QUEUE_TYPE="+t.topo.sinkType)
	}
	if t.who == WalboxStream {
		env = append(env, "WALBOX_STREAM_URL="+t.b.srv.StreamURL, "WALBOX_STREAM="+t.streamName())
	}
	return append(env, extra...)
}

// walboxBin is the walbox binary the contender runs.
func (t *trial) walboxBin() string {
	if t.who == WalboxBaseline {
		return t.b.cfg.BaselineBin
	}
	return t.b.cfg.WalboxBin
}

// streamName is the stream contender's stream: not the queue's name, which the broker holds.
func (t *trial) streamName() string { return t.name + ".stream" }

// walboxRun is the command line of `walbox run`. The lanes flag is given only for more than one
// lane, so that the one-lane contender runs whatever walbox binary is measured.
func (t *trial) walboxRun() []string {
	if n := t.who.connections(); n > 1 {
		return []string{"run", "--lanes", strconv.Itoa(n)}
	}
	return []string{"run"}
}

// startRelay starts the contender. The ceiling publishes count messages (at rate per second, or
// as fast as it can when rate is 0); the others relay whatever the database holds until stopped.
// Confirm latencies are recorded for messages from seq measureFrom on, unless it is negative.
func (t *trial) startRelay(count, rate, measureFrom int) (*process, error) {
	cfg, dir := t.b.cfg, t.b.cfg.WorkDir
	spec := childSpec{AMQPURL: t.b.srv.AMQPURL, Exchange: t.name, DatabaseURL: t.dbURL, Window: cfg.Window,
		MeasureFrom: measureFrom}
	if measureFrom >= 0 && (t.who.isCeiling() || t.who.polls()) {
		t.resultFile = filepath.Join(dir, t.label+".result.json")
		spec.ResultFile = t.resultFile
	}
	switch {
	case t.who.isCeiling():
		spec.Role, spec.Count, spec.Rate, spec.Payload = "ceiling", count, rate, t.sc.Payload
		spec.Publishers, spec.Nodes = t.who.connections(), t.b.srv.brokerURLs()
		spec.NoConfirms = t.who == NoConfirms
	case t.who.polls():
		spec.Role, spec.Batch, spec.Interval = "poll", cfg.PollBatch, t.who.pollInterval()
	case cfg.Profile:
		spec.Role, spec.Slot, spec.Profile = "walbox-inproc", t.name, filepath.Join(dir, t.label)
	default:
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		t.metricsURL = "http://" + addr + "/metrics"
		return start(dir, t.label, t.walboxBin(), t.walboxEnv("WALBOX_LISTEN="+addr), t.walboxRun()...)
	}
	return startChild(dir, t.label, spec)
}

// teardown removes what setup created.
func (t *trial) teardown() {
	t.topo.remove()
	if t.dbURL != "" {
		if err := dropDatabase(context.Background(), t.b.srv.DatabaseURL, t.name); err != nil {
			fmt.Fprintf(t.b.cfg.Log, "  cleanup: %v\n", err)
		}
	}
}

// lsn returns the current WAL insert position.
func (t *trial) lsn(ctx context.Context) (int64, error) { return walLSN(ctx, t.b.admin) }

// vacuum runs VACUUM ANALYZE on the trial's table, as autovacuum would have by then.
func (t *trial) vacuum(ctx context.Context) error {
	return execSQL(ctx, t.dbURL, "VACUUM ANALYZE "+t.table)
}

// usage is a reading of the CPU counters, and of the relay's write system calls.
type usage struct {
	relay, pg, broker float64
	writes            int64
}

func (b *bencher) usage(relayPID int) usage {
	u := usage{relay: 0, pg: treeCPU(b.srv.PostgresPID), broker: b.srv.brokerCPU()}
	if relayPID > 0 {
		u.relay, u.writes = processCPU(relayPID), writeCalls(relayPID)
	}
	return u
}

// since returns the CPU seconds spent between two readings; -1 where unknown.
func (u usage) since(before usage) (relay, pg, broker float64) {
	d := func(a, b float64) float64 {
		if a < 0 || b < 0 {
			return -1
		}
		return b - a
	}
	return d(before.relay, u.relay), d(before.pg, u.pg), d(before.broker, u.broker)
}
