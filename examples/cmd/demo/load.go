package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
)

// counters are the demo's progress.
type counters struct {
	placed    atomic.Int64 // orders the API accepted (201)
	failed    atomic.Int64 // orders the API refused or that could not be sent
	published atomic.Int64 // order messages seen on the exchange
}

// placeOrders posts orders to api at rate per second until ctx ends, from a few workers.
func placeOrders(ctx context.Context, api string, rate int, c *counters) {
	tokens := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range tokens {
				placeOne(api, c)
			}
		})
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	defer wg.Wait()
	defer close(tokens)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			select {
			case tokens <- struct{}{}:
			default: // all workers busy: the API is slower than the rate
			}
		}
	}
}

// placeOne places one order. A request in flight when placing stops still completes, so that
// placed counts every committed order.
func placeOne(api string, c *counters) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := fmt.Sprintf(`{"customer_id": %q, "amount_cents": %d}`, uuid.NewString(), 100+time.Now().UnixNano()%9900)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/orders", bytes.NewBufferString(body))
	if err != nil {
		c.failed.Add(1)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.failed.Add(1)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusCreated {
		c.placed.Add(1)
	} else {
		c.failed.Add(1)
	}
}

// tapPublished counts the order messages on exchange through a queue of its own, until ctx
// ends or the connection is lost.
func tapPublished(ctx context.Context, ch *amqp.Channel, queue string, c *counters) {
	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", true, true, false, false, nil)
	if err != nil {
		return
	}
	for range deliveries {
		c.published.Add(1)
	}
}

// snapshot is the progress at one moment.
type snapshot struct {
	placed, failed, published, notified int64
}

func (s snapshot) lag() int64 { return s.placed - s.notified }

func take(ctx context.Context, pool *pgxpool.Pool, c *counters) (snapshot, error) {
	s := snapshot{placed: c.placed.Load(), failed: c.failed.Load(), published: c.published.Load()}
	err := pool.QueryRow(ctx, "SELECT count(*) FROM notifications").Scan(&s.notified)
	if err != nil {
		return s, fmt.Errorf("count notifications: %w", err)
	}
	return s, nil
}

// report prints progress once a second until ctx ends.
func report(ctx context.Context, w io.Writer, pool *pgxpool.Pool, c *counters) {
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last snapshot
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s, err := take(ctx, pool, c)
		if err != nil {
			continue
		}
		fmt.Fprintf(w, "%4ds  placed %6d  published %6d  notified %6d  rate %4d/s  lag %4d\n",
			int(time.Since(start).Seconds()), s.placed, s.published, s.notified, s.notified-last.notified, s.lag())
		last = s
	}
}
