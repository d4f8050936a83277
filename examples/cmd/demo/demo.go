package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/examples/orders"
	"github.com/walbox/walbox/internal/testenv"
)

const (
	exchange     = "outbox"
	queue        = "notifications"
	stopTimeout  = 15 * time.Second
	readyTimeout = 30 * time.Second
)

// demo starts everything, places orders until ctx ends, waits (until drainCtx ends or
// cfg.drain passes) for the notifications to catch up, and prints the outcome.
func demo(ctx, drainCtx context.Context, cfg config, dir string, bins binaries, out io.Writer) error {
	fmt.Fprintln(out, "demo: building walbox, orders and notifier")
	if err := buildBinaries(ctx, dir); err != nil {
		return err
	}
	fmt.Fprintln(out, "demo: starting PostgreSQL and RabbitMQ")
	srv, closeServers, err := startServers(bins)
	defer closeServers()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "demo: postgres %s\ndemo: rabbitmq %s\n", srv.pg.URL(), srv.rabbit.URL())
	children, api, err := startServices(ctx, dir, srv)
	defer stopAll(children)
	if err != nil {
		return err
	}
	ch, tapQueue, err := tap(srv.rabbit.URL())
	if err != nil {
		return err
	}
	defer ch.Close()
	pool, err := pgxpool.New(context.Background(), srv.pg.URL())
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer pool.Close()
	fmt.Fprintf(out, "demo: order API on %s; placing %d orders/s (Ctrl-C to stop)\n", api, cfg.rate)
	c := &counters{}
	if cfg.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.duration)
		defer cancel()
	}
	if err := placeAndReport(ctx, api, cfg.rate, pool, ch, tapQueue, c, children, out); err != nil {
		return err
	}
	return finish(drainCtx, cfg.drain, pool, c, out)
}

// tap declares a queue of the demo's own on the relay's exchange, to count published
// messages. The returned channel owns the connection.
func tap(url string) (*amqp.Channel, string, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, "", fmt.Errorf("connect to rabbitmq: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, "", fmt.Errorf("open channel: %w", err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err == nil {
		err = ch.QueueBind(q.Name, orders.EventRoutingKeys, exchange, false, nil)
	}
	if err != nil {
		conn.Close()
		return nil, "", fmt.Errorf("declare tap queue: %w", err)
	}
	return ch, q.Name, nil
}

// startServices runs `walbox migrate`, then starts the notifier, the relay and the order
// service, and waits until the order API answers. It returns whatever it started, also on error.
func startServices(ctx context.Context, dir string, srv servers) ([]*testenv.Process, string, error) {
	bin := func(name string) string { return filepath.Join(dir, name) }
	db, amqpURL := srv.pg.URL(), srv.rabbit.URL()
	walboxEnv := []string{"WALBOX_DATABASE_URL=" + db, "WALBOX_AMQP_URL=" + amqpURL,
		"WALBOX_SLOT=demo", "WALBOX_EXCHANGE=" + exchange, "WALBOX_LOG_FORMAT=text"}
	if err := runOnce(ctx, bin("walbox"), walboxEnv, "migrate"); err != nil {
		return nil, "", err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	specs := []struct {
		name string
		env  []string
		args []string
	}{
		{"walbox", walboxEnv, []string{"run"}},
		{"notifier", []string{"NOTIFIER_DATABASE_URL=" + db, "NOTIFIER_AMQP_URL=" + amqpURL,
			"NOTIFIER_EXCHANGE=" + exchange, "NOTIFIER_QUEUE=" + queue}, nil},
		{"orders", []string{"ORDERS_DATABASE_URL=" + db, "ORDERS_LISTEN=" + addr}, nil},
	}
	var children []*testenv.Process
	for _, s := range specs {
		c, err := startChild(dir, s.name, bin(s.name), s.env, s.args...)
		if err != nil {
			return children, "", err
		}
		children = append(children, c)
		if s.name == "walbox" {
			// The notifier binds its queue to the relay's exchange, which must exist first.
			bctx, cancel := context.WithTimeout(ctx, readyTimeout)
			err := orders.BindQueue(bctx, amqpURL, exchange, queue, "")
			cancel()
			if err != nil {
				return children, "", errors.Join(err, exitedEarly(children))
			}
		}
	}
	api := "http://" + addr
	return children, api, waitHealthy(ctx, api, children)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitHealthy waits until the order API answers, failing if a service exits meanwhile.
func waitHealthy(ctx context.Context, api string, children []*testenv.Process) error {
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if err := exitedEarly(children); err != nil {
			return err
		}
		resp, err := http.Get(api + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("order API not ready after %v", readyTimeout)
}

// exitedEarly returns an error, with its log tail, for the first child that has exited.
func exitedEarly(children []*testenv.Process) error {
	for _, c := range children {
		if st := c.State(); st != nil {
			return fmt.Errorf("%s exited: %v%s", c.Name(), st, c.Tail(20))
		}
	}
	return nil
}

// placeAndReport places orders and prints progress until ctx ends or a service exits.
func placeAndReport(ctx context.Context, api string, rate int, pool *pgxpool.Pool, ch *amqp.Channel,
	tapQueue string, c *counters, children []*testenv.Process, out io.Writer) error {
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { placeOrders(runCtx, api, rate, c) })
	wg.Go(func() { report(runCtx, out, pool, c) })
	go tapPublished(context.Background(), ch, tapQueue, c) // runs until the channel closes
	defer wg.Wait()
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := exitedEarly(children); err != nil {
				return err
			}
		}
	}
}

// finish waits for the notifications and the published count to catch up with the orders
// placed, then prints the outcome.
func finish(drainCtx context.Context, drain time.Duration, pool *pgxpool.Pool, c *counters, out io.Writer) error {
	ctx, cancel := context.WithTimeout(drainCtx, drain)
	defer cancel()
	fmt.Fprintf(out, "demo: stopped placing orders; waiting up to %v for the notifier\n", drain)
	for {
		s, err := take(context.Background(), pool, c)
		if err != nil {
			return err
		}
		// The tap queue that counts published messages is a consumer of its own: it may see the
		// last message a moment after the notifier did.
		if (s.lag() == 0 && s.published >= s.placed) || ctx.Err() != nil {
			return summary(pool, s, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func summary(pool *pgxpool.Pool, s snapshot, out io.Writer) error {
	var dups int64
	err := pool.QueryRow(context.Background(),
		"SELECT count(*) - count(DISTINCT order_id) FROM notifications").Scan(&dups)
	if err != nil {
		return fmt.Errorf("count duplicate notifications: %w", err)
	}
	fmt.Fprintf(out, "demo: done: placed %d, failed %d, published %d, notified %d, duplicates %d, lag %d\n",
		s.placed, s.failed, s.published, s.notified, dups, s.lag())
	if s.lag() != 0 {
		return fmt.Errorf("%d orders not notified", s.lag())
	}
	return nil
}

// stopAll stops the services, the order API first and the notifier last.
func stopAll(children []*testenv.Process) {
	for i := len(children) - 1; i >= 0; i-- {
		stopChild(children[i], stopTimeout)
	}
}
