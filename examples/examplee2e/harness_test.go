package examplee2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/examples/orders"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// system is one test's database, exchange and queue, with the order API served in-process,
// and the relay and the notifier started on demand.
type system struct {
	t        *testing.T
	rabbit   *testenv.Rabbit
	db       string
	pool     *pgxpool.Pool
	slot     string
	exchange string
	queue    string
	api      *httptest.Server
}

func newSystem(t *testing.T, rabbit *testenv.Rabbit) *system {
	t.Helper()
	return newSystemWith(t, rabbit)
}

// newSystemWith is newSystem with the order service's store configured by opts.
func newSystemWith(t *testing.T, rabbit *testenv.Rabbit, opts ...orders.StoreOption) *system {
	t.Helper()
	if testenv.Short() {
		t.Skip("end-to-end test: needs PostgreSQL and RabbitMQ")
	}
	pg := testenv.SharedPostgres(t)
	s := &system{t: t, rabbit: rabbit, db: pg.NewDatabase(t), slot: testenv.UniqueName("slot"),
		exchange: testenv.UniqueName("ex"), queue: testenv.UniqueName("q")}
	if out, code := testenv.Run(t, s.walbox("migrate"), 2*time.Minute); code != 0 {
		t.Fatalf("walbox migrate exited %d:\n%s", code, out)
	}
	pool, err := pgxpool.New(context.Background(), s.db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s.pool = pool
	if err := orders.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	s.api = httptest.NewServer(orders.Handler(orders.NewStore(pool, opts...), testLogger(t, slog.LevelWarn)))
	t.Cleanup(s.api.Close)
	return s
}

func testLogger(t *testing.T, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
}

func (s *system) walbox(args ...string) *exec.Cmd {
	cmd := exec.Command(testenv.Build(s.t, "cmd/walbox"), args...)
	cmd.Env = append(os.Environ(),
		"WALBOX_DATABASE_URL="+s.db,
		"WALBOX_AMQP_URL="+s.rabbit.URL(),
		"WALBOX_SLOT="+s.slot,
		"WALBOX_EXCHANGE="+s.exchange,
		"WALBOX_STATUS_INTERVAL=100ms",
		"WALBOX_LOG_FORMAT=text",
	)
	return cmd
}

// startRelay starts `walbox run` and waits until it has declared its exchange.
func (s *system) startRelay() *testenv.Program {
	s.t.Helper()
	r := testenv.Start(s.t, s.walbox("run"))
	s.waitExchange(r)
	return r
}

// waitExchange waits until the relay has declared its exchange, which it does with arguments
// of its own (an alternate exchange) that a consumer declaring it first would lack.
func (s *system) waitExchange(r *testenv.Program) {
	s.t.Helper()
	r.WaitFor("exchange "+s.exchange, 30*time.Second, func() bool { return exchangeExists(s.rabbit.URL(), s.exchange) })
}

func exchangeExists(url, name string) bool {
	conn, err := amqp.Dial(url)
	if err != nil {
		return false
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return false
	}
	return ch.ExchangeDeclarePassive(name, amqp.ExchangeTopic, true, false, false, false, nil) == nil
}

// startNotifier runs the notification service's consumer in-process until cleanup.
func (s *system) startNotifier() {
	s.t.Helper()
	if err := orders.BindQueue(context.Background(), s.rabbit.URL(), s.exchange, s.queue, "quorum"); err != nil {
		s.t.Fatal(err)
	}
	s.startConsumer(orders.ConsumerConfig(s.rabbit.URL(), s.queue, "quorum"), nil) // as on a cluster
}

// startConsumer runs a notifier's consumer of cfg in-process until cleanup. Each message it
// handles is counted in handled, unless nil.
func (s *system) startConsumer(cfg consumer.Config, handled *atomic.Int64) {
	s.t.Helper()
	log := testLogger(s.t, slog.LevelWarn)
	ctx := context.Background()
	cfg.ReconnectBackoffMax = time.Second
	cfg.OnError = func(err error) {
		log.Warn("consumer", "err", err)
		if errors.Is(err, consumer.ErrNoDeliveryLimit) {
			s.t.Errorf("BindQueue declared the queue otherwise than the consumer: %v", err)
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Release()
	if err := migrations.ApplyConsumer(ctx, conn.Conn()); err != nil {
		s.t.Fatal(err)
	}
	if err := orders.MigrateNotifications(ctx, conn); err != nil {
		s.t.Fatal(err)
	}
	h := orders.NotificationHandler(log)
	if handled != nil {
		notify := h
		h = func(ctx context.Context, tx pgx.Tx, d consumer.Delivery) error {
			handled.Add(1)
			return notify(ctx, tx, d)
		}
	}
	c, err := consumer.New(s.pool, cfg, h)
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	s.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			s.t.Errorf("notifier: %v", err)
		}
	})
}

// post sends body to POST /orders and returns the status and decoded JSON response.
func (s *system) post(body string) (int, map[string]any) {
	s.t.Helper()
	resp, err := http.Post(s.api.URL+"/orders", "application/json", bytes.NewBufferString(body))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		s.t.Fatalf("POST /orders %s: status %d, body %q is not JSON", body, resp.StatusCode, data)
	}
	return resp.StatusCode, got
}

// placeOrder places an order over HTTP and returns it as the API returned it.
func (s *system) placeOrder(customer string, cents int64) orders.Order {
	s.t.Helper()
	status, got := s.post(fmt.Sprintf(`{"customer_id": %q, "amount_cents": %d}`, customer, cents))
	if status != http.StatusCreated {
		s.t.Fatalf("POST /orders: status %d, %v", status, got)
	}
	data, _ := json.Marshal(got)
	var o orders.Order
	if err := json.Unmarshal(data, &o); err != nil {
		s.t.Fatalf("decode order %s: %v", data, err)
	}
	return o
}

func (s *system) count(sql string, args ...any) int {
	s.t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		s.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// waitNotified waits until the notifications table holds n rows.
func (s *system) waitNotified(n int, timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := s.count("SELECT count(*) FROM notifications")
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%d of %d notifications after %v", got, n, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
