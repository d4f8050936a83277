package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ShardsConfig configures the sharding measurement: for each shard count, a backlog drained by
// one relay per shard, each streaming its own slot.
type ShardsConfig struct {
	Walbox string // the walbox binary
	Dir    string // logs of the relays
	Counts []int  // shard counts; 1 is the single slot, without a row filter
	Rows   int    // backlog rows (1,000 aggregates, in transactions of TxSize rows)
	TxSize int
	Window int
	Log    io.Writer
}

// ShardResult is one shard count's drain.
type ShardResult struct {
	Shards     int
	Messages   int
	Seconds    float64 // first to last delivery
	Rate       float64 // messages per second, all relays together
	Walsenders float64 // CPU seconds of the walsenders, together
	Relays     float64 // CPU seconds of the relays, together
	Postgres   float64 // CPU seconds of the whole server, walsenders included
	Sessions   int     // walsender processes seen; more than Shards means a relay reconnected
	Err        string
}

// WalsenderPerMessage is the walsenders' CPU per message delivered, in microseconds.
func (r ShardResult) WalsenderPerMessage() float64 { return 1e6 * r.Walsenders / float64(r.Messages) }

// RelayPerMessage is the relays' CPU per message delivered, in microseconds.
func (r ShardResult) RelayPerMessage() float64 { return 1e6 * r.Relays / float64(r.Messages) }

// Shards measures each shard count in turn on srv.
func Shards(ctx context.Context, cfg ShardsConfig, srv Servers) []ShardResult {
	var out []ShardResult
	for _, n := range cfg.Counts {
		r, err := drainShards(ctx, cfg, srv, n)
		if err != nil {
			r.Err = err.Error()
		}
		fmt.Fprintf(cfg.Log, "shards %d: %.0f msg/s, walsenders %.1f µs/msg, relays %.1f µs/msg %s\n",
			n, r.Rate, r.WalsenderPerMessage(), r.RelayPerMessage(), r.Err)
		out = append(out, r)
	}
	return out
}

func drainShards(ctx context.Context, cfg ShardsConfig, srv Servers, n int) (ShardResult, error) {
	r := ShardResult{Shards: n, Messages: cfg.Rows}
	name := fmt.Sprintf("walbox_shards_%d_%d", n, os.Getpid())
	dbURL, err := createDatabase(ctx, srv.DatabaseURL, name)
	if err != nil {
		return r, err
	}
	defer func() { _ = dropDatabase(context.Background(), srv.DatabaseURL, name) }()
	env := []string{"WALBOX_DATABASE_URL=" + dbURL, "WALBOX_AMQP_URL=" + srv.AMQPURL, "WALBOX_SLOT=" + name,
		"WALBOX_EXCHANGE=" + name, "WALBOX_WINDOW=" + fmt.Sprint(cfg.Window), "WALBOX_LISTEN=off", "WALBOX_LOG_FORMAT=text"}
	if n > 1 {
		env = append(env, "WALBOX_SHARDS="+fmt.Sprint(n))
	}
	migrate, err := start(cfg.Dir, name+"-migrate", cfg.Walbox, env, "migrate")
	if err != nil {
		return r, err
	}
	if err := migrate.wait(time.Minute); err != nil {
		return r, fmt.Errorf("walbox migrate: %w\n%s", err, migrate.Tail(10))
	}
	topo := topology{url: srv.AMQPURL, exchange: name, queue: name, queueType: "classic"}
	if err := topo.declare(); err != nil {
		return r, err
	}
	defer topo.remove()
	cons, err := consume(srv.AMQPURL, name, cfg.Rows)
	if err != nil {
		return r, err
	}
	defer cons.stop()
	prod, err := newProducer(ctx, dbURL, "outbox", 4, 100)
	if err != nil {
		return r, err
	}
	err = prod.backlog(ctx, 0, cfg.Rows, cfg.TxSize)
	prod.close()
	if err != nil {
		return r, err
	}
	if err := execSQL(ctx, dbURL, "CHECKPOINT"); err != nil {
		return r, err
	}
	pgBefore := treeCPU(srv.PostgresPID)
	var relays []*process
	defer func() {
		for _, p := range relays {
			p.kill()
		}
	}()
	for k := range n {
		relayEnv := env
		if n > 1 {
			relayEnv = append(env[:len(env):len(env)], "WALBOX_SHARD="+fmt.Sprint(k))
		}
		p, err := start(cfg.Dir, fmt.Sprintf("%s-relay-%d", name, k), cfg.Walbox, relayEnv, "run")
		if err != nil {
			return r, err
		}
		relays = append(relays, p)
	}
	senders := map[int]float64{} // walsender pid to its CPU seconds when last read
	var lastRead time.Time
	alive := func() error {
		for _, p := range relays {
			if err := p.alive(); err != nil {
				return fmt.Errorf("%w\n%s", err, p.Tail(10))
			}
		}
		if time.Since(lastRead) < 250*time.Millisecond {
			return nil
		}
		lastRead = time.Now()
		return readWalsenders(ctx, dbURL, name, senders)
	}
	if err := cons.wait(ctx, cfg.Rows, 2*time.Minute, alive); err != nil {
		return r, err
	}
	if err := readWalsenders(ctx, dbURL, name, senders); err != nil {
		return r, err
	}
	for _, p := range relays {
		r.Relays += processCPU(p.pid())
	}
	for _, cpu := range senders {
		r.Walsenders += cpu
	}
	r.Postgres = treeCPU(srv.PostgresPID) - pgBefore
	r.Sessions = len(senders)
	r.Seconds, r.Rate = span(cons.arrivals)
	return r, nil
}

// readWalsenders records the CPU seconds of the walsenders streaming the slots whose names
// start with prefix. A walsender's whole life is the drain, so its total is what it spent.
func readWalsenders(ctx context.Context, dbURL, prefix string, seen map[int]float64) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name LIKE $1 || '%' AND active_pid IS NOT NULL", prefix)
	if err != nil {
		return err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return err
	}
	for _, pid := range pids {
		if cpu := processCPU(int(pid)); cpu >= 0 {
			seen[int(pid)] = cpu
		}
	}
	return nil
}

// ShardsMarkdown renders the results as a table.
func ShardsMarkdown(rs []ShardResult) string {
	var b strings.Builder
	b.WriteString("| shards | messages | drain s | msg/s (all relays) | walsender CPU s | walsender µs/msg | per walsender µs/WAL row | relay µs/msg | PostgreSQL CPU s |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		if r.Err != "" {
			fmt.Fprintf(&b, "| %d | failed: %s |||||||\n", r.Shards, firstLine(r.Err))
			continue
		}
		// Each walsender decodes every row of the WAL, whichever shard it publishes.
		perSender := 1e6 * r.Walsenders / float64(max(r.Sessions, 1)) / float64(r.Messages)
		fmt.Fprintf(&b, "| %d | %d | %.1f | %.0f | %.2f | %.1f | %.1f | %.1f | %.1f |\n", r.Shards, r.Messages, r.Seconds, r.Rate,
			r.Walsenders, r.WalsenderPerMessage(), perSender, r.RelayPerMessage(), r.Postgres)
	}
	return b.String()
}
