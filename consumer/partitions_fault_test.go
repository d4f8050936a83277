package consumer_test

import (
	"context"
	"hash/crc32"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/walbox/walbox/consumer"
)

// The fault test of partitions, in two passes of one run: three consumer processes share eight
// partitions while each is killed with SIGKILL and restarted once. One pass also fails 1% of
// the messages until they are released. Both handle every message once, each
// aggregate's in order. The throughput of the one over the other is the cost of failures.
// `make test` runs 5,000 messages over 100 aggregates; WALBOX_SOAK=1 runs 200,000 over 2,000.
// WALBOX_SOAK_PARTITIONED_MESSAGES and WALBOX_SOAK_PARTITIONED_AGGREGATES set them.
func TestPartitionsSurviveKillsAndFailures(t *testing.T) {
	skipShort(t)
	messages := soakInt("WALBOX_SOAK_PARTITIONED_MESSAGES", 5_000, 200_000)
	aggs := aggregates(soakInt("WALBOX_SOAK_PARTITIONED_AGGREGATES", 100, 2_000))
	perAggregate := messages / len(aggs)
	// The passes run side by side, so that both see the same load of a shared machine.
	var clean, failing passResult
	t.Run("passes", func(t *testing.T) {
		t.Run("without failures", func(t *testing.T) {
			t.Parallel()
			clean = runFaultPass(t, aggs, perAggregate, 0)
		})
		t.Run("with failures", func(t *testing.T) {
			t.Parallel()
			failing = runFaultPass(t, aggs, perAggregate, 100)
		})
	})
	if t.Failed() {
		return
	}
	t.Logf("SUMMARY %s messages=%d aggregates=%d partitions=8 processes=3 kills=%d failed=%d released=%d held=%d "+
		"clean=%.0f/s with_failures=%.0f/s ratio=%.2f",
		t.Name(), len(aggs)*perAggregate, len(aggs), clean.kills+failing.kills, failing.failing, failing.released, failing.held,
		clean.rate, failing.rate, failing.rate/clean.rate)
}

// passResult is what one pass measured.
type passResult struct {
	rate              float64 // messages handled a second, from the first publish to the last handled
	kills             int
	failing, released int
	held              int // messages stored in a hold
}

// runFaultPass publishes perAggregate messages of each aggregate to three consumer processes and
// kills each once along the way. One message in failEvery (none if 0), picked by a hash of its
// id, fails until released.
func runFaultPass(t *testing.T, aggs []string, perAggregate, failEvery int) passResult {
	e := newPartEnv(t, nil)
	cfg := e.partConfig(8)
	total := len(aggs) * perAggregate
	var res passResult
	for _, a := range aggs {
		for seq := 1; seq <= perAggregate && failEvery > 0; seq++ {
			if id := msgID(a, seq); crc32.ChecksumIEEE([]byte(id))%uint32(failEvery) == 0 {
				e.fail(t, id)
				res.failing++
			}
		}
	}
	procs := []*child{e.startChild(t, "p0", cfg), e.startChild(t, "p1", cfg), e.startChild(t, "p2", cfg)}
	e.waitLeases(t, cfg, 8, 3)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	if failEvery > 0 {
		wg.Go(func() { res.released = e.releaseFailed(ctx, t, cfg) })
	}
	started := time.Now()
	e.publishAggregates(t, aggs, 1, perAggregate)
	for i, p := range procs {
		e.waitHandled(t, total*(i+1)/4, 30*time.Minute)
		p.kill()
		procs[i] = e.startChild(t, p.name, cfg)
		res.kills++
	}
	e.waitHandled(t, total, 60*time.Minute)
	res.rate = float64(total) / time.Since(started).Seconds()
	cancel()
	wg.Wait()
	e.checkHandled(t, aggs, perAggregate, nil)
	res.held = e.count(t, "SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'walbox_held_messages'")
	for _, p := range procs {
		p.kill()
	}
	return res
}

// releaseFailed releases, until ctx ends, every aggregate whose held message failed for good.
// It first takes that message off the failing list, so that it succeeds. It returns how many
// it released.
func (e *partEnv) releaseFailed(ctx context.Context, t *testing.T, cfg consumer.Config) int {
	released := 0
	for ctx.Err() == nil {
		rows, err := e.pool.Query(ctx, `SELECT h.aggregate_id, m.message_id FROM walbox_consumer_holds h
			JOIN LATERAL (SELECT message_id FROM walbox_held_messages m WHERE m.consumer = h.consumer
				AND m.aggregate_id = h.aggregate_id ORDER BY seq LIMIT 1) m ON true
			WHERE h.consumer = $1 AND h.failed`, cfg.Queue)
		var heads [][2]string
		for err == nil && rows.Next() {
			var h [2]string
			if rows.Scan(&h[0], &h[1]) == nil {
				heads = append(heads, h)
			}
		}
		if rows != nil {
			rows.Close()
		}
		for _, h := range heads {
			_, err1 := e.pool.Exec(ctx, "DELETE FROM failing WHERE message_id = $1", h[1])
			_, err2 := e.pool.Exec(ctx, "SELECT walbox_release($1, $2)", cfg.Queue, h[0])
			if err1 == nil && err2 == nil {
				released++
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return released
}

// soakInt returns the integer in env if set, else soak under WALBOX_SOAK, else short.
func soakInt(env string, short, soak int) int {
	if n, err := strconv.Atoi(os.Getenv(env)); err == nil && n > 0 {
		return n
	}
	if v, _ := strconv.ParseBool(os.Getenv("WALBOX_SOAK")); v {
		return soak
	}
	return short
}
