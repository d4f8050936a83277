package consumer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/consumer/internal/handling"
)

// keeper spreads the partitions over the live processes of one consumer name. Each process is a
// member with a heartbeat row; each partition has a lease. A member holds at most its share,
// the partitions divided by the live members, rounded up. It releases the rest and takes free
// or expired leases up to its share. The keeper runs one worker per partition it holds.
type keeper struct {
	c      *Consumer
	member string
	// workers are the partitions this process consumes, by partition.
	workers map[int]*worker
	// exits receives each worker as it ends.
	exits chan *worker
	// away says this process left the membership: its partitions could not reach the broker.
	away bool
}

// beatInterval is how often the keeper renews: a third of the lease.
func (c *Config) beatInterval() time.Duration { return c.LeaseDuration / 3 }

// stopMargin is how long before its lease ends a worker stops: a fifth of the lease.
func (c *Config) stopMargin() time.Duration { return c.LeaseDuration / 5 }

// runPartitions is Run for a partitioned consumer.
func (c *Consumer) runPartitions(ctx context.Context) error {
	if err := c.topology(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	host, _ := os.Hostname()
	k := &keeper{
		c:       c,
		member:  fmt.Sprintf("%s/%s/%d/%s", c.cfg.ConsumerName, host, os.Getpid(), uuid.NewString()[:8]),
		workers: map[int]*worker{},
		exits:   make(chan *worker),
	}
	return k.run(ctx)
}

// run beats until ctx ends or a worker fails fatally. Then it stops every worker, waits for
// them and leaves the membership.
func (k *keeper) run(ctx context.Context) error {
	defer k.leave()
	var fatalErr error
	tick := time.NewTimer(0)
	defer tick.Stop()
	for fatalErr == nil {
		select {
		case <-ctx.Done():
			k.stopAll()
			return nil
		case w := <-k.exits:
			fatalErr = k.exited(w)
		case <-tick.C:
			if err := k.beat(ctx); err != nil && ctx.Err() == nil {
				err = leaseError(err)
				k.c.report(err)
				if Fatal(err) {
					fatalErr = err
				}
			}
			tick.Reset(k.c.cfg.beatInterval())
		}
	}
	k.stopAll()
	return fatalErr
}

// exited forgets a worker that ended, returning its error if no retry can cure it.
func (k *keeper) exited(w *worker) error {
	delete(k.workers, w.partition)
	if w.err != nil && Fatal(w.err) {
		return w.err
	}
	return nil
}

// stopAll stops every worker and waits for each.
func (k *keeper) stopAll() {
	for _, w := range k.workers {
		w.stop()
	}
	for len(k.workers) > 0 {
		k.exited(<-k.exits)
	}
}

// leave removes this member, so that the others take its share without waiting for its expiry.
func (k *keeper) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_, _ = k.c.pool.Exec(ctx, k.c.psql.leave, k.c.cfg.ConsumerName, k.member)
}

// beat renews this member and its leases, and stops workers whose lease was lost. Then it
// balances: it stops workers above its share and takes free leases up to it.
func (k *keeper) beat(ctx context.Context) error {
	if k.away && !k.reachable(ctx) {
		return nil
	}
	k.away = false
	if k.cutOff() {
		k.goAway()
		return errCutOff
	}
	cfg, sql := &k.c.cfg, &k.c.psql
	sent := time.Now()
	if _, err := k.c.pool.Exec(ctx, sql.beat, cfg.ConsumerName, k.member, cfg.LeaseDuration); err != nil {
		return handling.ClassifyDB(fmt.Errorf("renew member: %w", err))
	}
	var live int
	if err := k.c.pool.QueryRow(ctx, sql.live, cfg.ConsumerName, cfg.LeaseDuration).Scan(&live); err != nil {
		return handling.ClassifyDB(fmt.Errorf("count members: %w", err))
	}
	if err := k.renew(ctx, sent); err != nil {
		return err
	}
	share := (cfg.Partitions + max(live, 1) - 1) / max(live, 1)
	held := k.kept()
	for len(held) > share {
		k.workers[held[len(held)-1]].stop() // its lease is freed once it stopped
		held = held[:len(held)-1]
	}
	if len(held) < share {
		return k.acquire(ctx, share-len(held))
	}
	return nil
}

// cutOff says every partition this process consumes had no broker session for a lease. They
// would wait for the broker while another process could consume them.
func (k *keeper) cutOff() bool {
	held := k.kept()
	for _, p := range held {
		if !k.workers[p].unreachable(k.c.cfg.LeaseDuration) {
			return false
		}
	}
	return len(held) > 0
}

// goAway stops every worker, which frees its lease, and leaves the membership. The others then
// count one member less and take the partitions. The process joins again once reachable.
func (k *keeper) goAway() {
	k.away = true
	for _, w := range k.workers {
		w.stop()
	}
	k.leave()
}

// reachable says a connection to the broker opens, within a lease.
func (k *keeper) reachable(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, k.c.cfg.LeaseDuration)
	defer cancel()
	return k.c.withChannel(ctx, k.c.cfg.ConsumerName+" probe", func(*amqp.Connection, *amqp.Channel) error { return nil }) == nil
}

// kept lists, in order, the partitions of workers not told to stop.
func (k *keeper) kept() []int {
	var ps []int
	for p, w := range k.workers {
		if !w.stopping() {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return ps
}

// renew extends the leases of every running worker. A worker whose lease was not renewed lost
// it: it stops at once. The others may run until sent plus the lease, less the margin.
func (k *keeper) renew(ctx context.Context, sent time.Time) error {
	if len(k.workers) == 0 {
		return nil
	}
	cfg := &k.c.cfg
	ps := make([]int32, 0, len(k.workers))
	for p := range k.workers {
		ps = append(ps, int32(p))
	}
	rows, err := k.c.pool.Query(ctx, k.c.psql.renew, cfg.ConsumerName, k.member, cfg.LeaseDuration, ps)
	if err != nil {
		return handling.ClassifyDB(fmt.Errorf("renew leases: %w", err))
	}
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return handling.ClassifyDB(fmt.Errorf("renew leases: %w", err))
	}
	until := sent.Add(cfg.LeaseDuration - cfg.stopMargin())
	for p, w := range k.workers {
		if slices.Contains(renewed, int32(p)) {
			w.extend(until)
		} else {
			w.lose()
		}
	}
	return nil
}

// acquire takes up to n free or expired leases and starts a worker on each.
func (k *keeper) acquire(ctx context.Context, n int) error {
	cfg := &k.c.cfg
	if _, err := k.c.pool.Exec(ctx, k.c.psql.initLeases, cfg.ConsumerName, cfg.Partitions); err != nil {
		return handling.ClassifyDB(fmt.Errorf("create leases: %w", err))
	}
	sent := time.Now()
	rows, err := k.c.pool.Query(ctx, k.c.psql.acquire, cfg.ConsumerName, k.member, cfg.LeaseDuration, cfg.Partitions, n)
	if err != nil {
		return handling.ClassifyDB(fmt.Errorf("acquire leases: %w", err))
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return handling.ClassifyDB(fmt.Errorf("acquire leases: %w", err))
	}
	for _, p := range got {
		if _, ok := k.workers[int(p)]; ok {
			// A worker still stopping after it lost this lease: its exit frees it again.
			continue
		}
		w := newWorker(ctx, k, int(p), sent.Add(cfg.LeaseDuration-cfg.stopMargin()))
		k.workers[int(p)] = w
		go w.run()
	}
	return nil
}

// leaseError names the keeper's error. A missing table names the migration that creates it.
func leaseError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return fmt.Errorf("partition leases: %w (migrations.ApplyConsumer creates the partition tables)", err)
	}
	return fmt.Errorf("partition leases: %w", err)
}

// errCutOff says this process gave up its partitions: it could not reach the broker for a lease.
var errCutOff = errors.New("partitions given up to the other processes: no broker session for a lease")

// errLeaseLost ends a worker whose lease ended or was taken over.
var errLeaseLost = errors.New("partition lease lost")
