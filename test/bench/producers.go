package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/outbox"
)

// ProducerMode is a way for a producer to write its messages.
type ProducerMode string

// The ways to write compared by MeasureProducers.
const (
	ModeTable       ProducerMode = "table, insert only"
	ModeTableDelete ProducerMode = "table, delete after insert"
	ModeEmit        ProducerMode = "walbox_emit"
)

// ProducerModes are the modes MeasureProducers compares, in report order.
var ProducerModes = []ProducerMode{ModeTable, ModeTableDelete, ModeEmit}

// ProducerConfig configures MeasureProducers.
type ProducerConfig struct {
	// Duration of each producer trial (one mode at one client count).
	Duration time.Duration
	// Clients are the client counts, each a connection committing one message per transaction.
	Clients []int
	// Rounds repeats every trial, interleaved (each round runs every mode at every client
	// count), so that a change in the machine's load falls on every mode alike; rates are the
	// median over the rounds (default 1).
	Rounds int
	// Payload is the size of each message's JSON payload in bytes.
	Payload int
	// WalboxBin is the walbox binary (BuildWalbox), for migrate and the drain.
	WalboxBin string
	// Log receives progress lines (default: discard).
	Log io.Writer
}

// ProducerResult is what one trial measured. Drain is measured once per mode, after the trial
// with the most clients, over the messages it wrote.
type ProducerResult struct {
	Mode       ProducerMode
	Clients    int
	Messages   int           // transactions committed, one message each
	TPS        float64       // transactions per second
	WALPerMsg  float64       // WAL bytes per message
	LiveTuples int64         // outbox rows left
	DeadTuples int64         // dead outbox tuples left for VACUUM
	TableBytes int64         // the outbox table with its indexes and TOAST
	Vacuum     time.Duration // VACUUM of the outbox table after the trial
	Drained    int           // messages the relay delivered in the drain (0: not drained)
	DrainRate  float64       // messages per second, first to last delivery
}

// MeasureProducers runs every mode at every client count on a database of its own, in one run,
// and drains each mode's backlog of the largest trial through `walbox run`. With several rounds the
// rates are medians and the other figures those of the last round.
func MeasureProducers(ctx context.Context, cfg ProducerConfig, srv Servers) ([]ProducerResult, error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	cfg.Rounds = max(cfg.Rounds, 1)
	maxClients := 0
	for _, n := range cfg.Clients {
		maxClients = max(maxClients, n)
	}
	type key struct {
		mode    ProducerMode
		clients int
	}
	rounds := map[key][]ProducerResult{}
	for round := range cfg.Rounds {
		for _, n := range cfg.Clients {
			for _, mode := range ProducerModes {
				r, err := producerTrial(ctx, cfg, srv, mode, n, n == maxClients)
				if err != nil {
					return nil, fmt.Errorf("%s, %d clients: %w", mode, n, err)
				}
				fmt.Fprintf(cfg.Log, "producers: round %d, %s, %d clients: %.0f tx/s, %.0f WAL bytes/message, %d dead tuples, drain %.0f/s\n",
					round+1, mode, n, r.TPS, r.WALPerMsg, r.DeadTuples, r.DrainRate)
				rounds[key{mode, n}] = append(rounds[key{mode, n}], r)
			}
		}
	}
	var out []ProducerResult
	for _, mode := range ProducerModes {
		for _, n := range cfg.Clients {
			rs := rounds[key{mode, n}]
			r := rs[len(rs)-1]
			r.TPS = median(rs, func(r ProducerResult) float64 { return r.TPS })
			r.DrainRate = median(rs, func(r ProducerResult) float64 { return r.DrainRate })
			out = append(out, r)
		}
	}
	return out, nil
}

// median returns the median of f over rs.
func median(rs []ProducerResult, f func(ProducerResult) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func producerTrial(ctx context.Context, cfg ProducerConfig, srv Servers, mode ProducerMode, clients int, drain bool) (ProducerResult, error) {
	r := ProducerResult{Mode: mode, Clients: clients}
	name := fmt.Sprintf("walbox_producers_%d", time.Now().UnixNano())
	dbURL, err := createDatabase(ctx, srv.DatabaseURL, name)
	if err != nil {
		return r, err
	}
	defer dropDatabase(context.WithoutCancel(ctx), srv.DatabaseURL, name) //nolint:errcheck // best effort
	env := []string{"WALBOX_DATABASE_URL=" + dbURL, "WALBOX_AMQP_URL=" + srv.AMQPURL, "WALBOX_SLOT=" + name,
		"WALBOX_EXCHANGE=" + name, "WALBOX_LISTEN=off", "WALBOX_LOG_FORMAT=text", "WALBOX_CANARY_INTERVAL=0"}
	if out, err := testenv.Exec(ctx, "walbox migrate", walboxCmd(cfg.WalboxBin, env, "migrate")); err != nil {
		return r, fmt.Errorf("%w\n%s", err, out)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return r, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// Dead tuples are counted, not vacuumed away mid-trial; every trial starts past a checkpoint.
	if _, err := conn.Exec(ctx, "ALTER TABLE outbox SET (autovacuum_enabled = off); CHECKPOINT"); err != nil {
		return r, err
	}
	wal0, err := walLSN(ctx, conn)
	if err != nil {
		return r, err
	}
	start := time.Now()
	if r.Messages, err = produce(ctx, dbURL, writerFor(mode), clients, cfg.Duration, cfg.Payload); err != nil {
		return r, err
	}
	r.TPS = float64(r.Messages) / time.Since(start).Seconds()
	wal1, err := walLSN(ctx, conn)
	if err != nil {
		return r, err
	}
	r.WALPerMsg = float64(wal1-wal0) / float64(max(r.Messages, 1))
	time.Sleep(1500 * time.Millisecond) // the producers' backends have exited and flushed their statistics
	err = conn.QueryRow(ctx, `SELECT n_live_tup, n_dead_tup, pg_total_relation_size(relid)
		FROM pg_stat_user_tables WHERE relname = 'outbox'`).Scan(&r.LiveTuples, &r.DeadTuples, &r.TableBytes)
	if err != nil {
		return r, fmt.Errorf("table statistics: %w", err)
	}
	vacStart := time.Now()
	if _, err := conn.Exec(ctx, "VACUUM outbox"); err != nil {
		return r, err
	}
	r.Vacuum = time.Since(vacStart)
	if drain {
		r.Drained, r.DrainRate, err = drainBacklog(ctx, cfg.WalboxBin, env, srv.AMQPURL, name, r.Messages)
	}
	return r, err
}

func writerFor(mode ProducerMode) *outbox.Writer {
	switch mode {
	case ModeTableDelete:
		return outbox.NewWriter(outbox.DefaultTable, outbox.DeleteAfterInsert())
	case ModeEmit:
		return outbox.NewWriter(outbox.DefaultTable, outbox.EmitMessages())
	}
	return outbox.NewWriter(outbox.DefaultTable)
}

// produce commits single-message transactions from clients connections for d and returns how
// many committed.
func produce(ctx context.Context, dbURL string, w *outbox.Writer, clients int, d time.Duration, payload int) (int, error) {
	body := []byte(`{"pad": "` + strings.Repeat("x", max(payload-11, 0)) + `"}`)
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		mu    sync.Mutex
		total int
		first error
		wg    sync.WaitGroup
	)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := produceOne(ctx, dbURL, w, c, body)
			mu.Lock()
			defer mu.Unlock()
			total += n
			if first == nil {
				first = err
			}
		}()
	}
	wg.Wait()
	return total, first
}

func produceOne(ctx context.Context, dbURL string, w *outbox.Writer, client int, body []byte) (int, error) {
	conn, err := pgx.Connect(context.WithoutCancel(ctx), dbURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	m := outbox.Message{AggregateType: "bench", AggregateID: fmt.Sprint(client), EventType: "bench.event", Payload: body}
	n := 0
	for ctx.Err() == nil {
		// Each transaction runs to its end whatever ctx does, so that n counts what committed.
		tctx := context.WithoutCancel(ctx)
		err := pgx.BeginFunc(tctx, conn, func(tx pgx.Tx) error { return w.Write(tctx, tx, m) })
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// drainBacklog starts `walbox run` on a backlog of want messages and returns how many a consumer
// received and at what rate, first delivery to last.
func drainBacklog(ctx context.Context, bin string, env []string, amqpURL, exchange string, want int) (int, float64, error) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, 0, err
	}
	ae := exchange + ".unroutable"
	if err := errors.Join(
		ch.ExchangeDeclare(ae, "fanout", true, false, false, false, nil),
		ch.ExchangeDeclare(exchange, "topic", true, false, false, false, amqp.Table{"alternate-exchange": ae}),
	); err != nil {
		return 0, 0, err
	}
	q, err := ch.QueueDeclare(exchange, false, true, false, false, nil)
	if err != nil {
		return 0, 0, err
	}
	if err := ch.QueueBind(q.Name, "#", exchange, false, nil); err != nil {
		return 0, 0, err
	}
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return 0, 0, err
	}
	relay, err := testenv.Spawn("walbox run", walboxCmd(bin, env, "run"))
	if err != nil {
		return 0, 0, err
	}
	defer relay.Kill()
	var first, last time.Time
	n := 0
	timeout := time.NewTimer(2 * time.Minute)
	defer timeout.Stop()
	for n < want {
		select {
		case _, ok := <-deliveries:
			if !ok {
				return n, 0, errors.New("drain: consumer channel closed")
			}
			last = time.Now()
			if n == 0 {
				first = last
			}
			n++
		case <-timeout.C:
			return n, 0, fmt.Errorf("drain: %d of %d messages after 2 minutes", n, want)
		case <-ctx.Done():
			return n, 0, ctx.Err()
		}
	}
	return n, float64(n-1) / max(last.Sub(first).Seconds(), 1e-9), nil
}

// walboxCmd is a walbox command with env as its whole environment.
func walboxCmd(bin string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	return cmd
}

// ProducerTable renders results as a markdown table.
func ProducerTable(results []ProducerResult) string {
	var b strings.Builder
	b.WriteString("| way to write | clients | tx/s | WAL bytes/message | rows left | dead tuples | table size | VACUUM | relay drain |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		drain := "-"
		if r.Drained > 0 {
			drain = fmt.Sprintf("%.0f/s (%d)", r.DrainRate, r.Drained)
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %d | %d | %s | %s | %s |\n", r.Mode, r.Clients, r.TPS, r.WALPerMsg,
			r.LiveTuples, r.DeadTuples, sizeIEC(r.TableBytes), r.Vacuum.Round(time.Millisecond), drain)
	}
	return b.String()
}

func sizeIEC(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
