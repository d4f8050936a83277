// Command orders is the example order service: an HTTP API that writes each order together with
// its order.created outbox message in one transaction, for walbox to relay.
//
//	orders [-listen 127.0.0.1:8080] [-database-url postgres://...]
//
// Flags fall back to ORDERS_LISTEN and ORDERS_DATABASE_URL. SIGINT or SIGTERM shuts the server
// down gracefully.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walbox/walbox/examples/orders"
)

const shutdownTimeout = 10 * time.Second

type config struct {
	listen      string
	databaseURL string
	outbox      string        // "table" or "emit"
	reminder    time.Duration // when an unpaid order's payment reminder leaves; 0: none
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, log, nil); err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	fs.StringVar(&cfg.listen, "listen", envOr(getenv, "ORDERS_LISTEN", "127.0.0.1:8080"), "address to serve HTTP on (env ORDERS_LISTEN)")
	fs.StringVar(&cfg.databaseURL, "database-url", getenv("ORDERS_DATABASE_URL"), "PostgreSQL URL (env ORDERS_DATABASE_URL)")
	fs.StringVar(&cfg.outbox, "outbox", envOr(getenv, "ORDERS_OUTBOX", "table"),
		"how to write each order's message: table (an outbox row) or emit (walbox_emit, no row) (env ORDERS_OUTBOX)")
	fs.DurationVar(&cfg.reminder, "payment-reminder", 24*time.Hour,
		"when an unpaid order's order.payment_reminder leaves, after its creation; paying cancels it; 0: none (env ORDERS_PAYMENT_REMINDER)")
	if v := getenv("ORDERS_PAYMENT_REMINDER"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return config{}, fmt.Errorf("ORDERS_PAYMENT_REMINDER %q: want a duration like 24h, or 0", v)
		}
		cfg.reminder = d
	}
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if cfg.outbox != "table" && cfg.outbox != "emit" {
		return config{}, fmt.Errorf("--outbox (ORDERS_OUTBOX) %q: want table or emit", cfg.outbox)
	}
	if cfg.databaseURL == "" {
		return config{}, errors.New("--database-url (ORDERS_DATABASE_URL): required")
	}
	return cfg, nil
}

func storeOptions(cfg config) []orders.StoreOption {
	opts := []orders.StoreOption{orders.PaymentReminder(cfg.reminder)}
	if cfg.outbox == "emit" {
		opts = append(opts, orders.EmitMessages())
	}
	return opts
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// run serves until ctx ends, then shuts down gracefully. ready, if not nil, receives the
// address the server listens on.
func run(ctx context.Context, cfg config, log *slog.Logger, ready chan<- string) error {
	pool, err := pgxpool.New(ctx, cfg.databaseURL)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer pool.Close()
	if err := orders.Migrate(ctx, pool); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		Handler:           orders.Handler(orders.NewStore(pool, storeOptions(cfg)...), log),
		ReadHeaderTimeout: 10 * time.Second,
	}
	log.Info("serving", "addr", ln.Addr().String())
	if ready != nil {
		ready <- ln.Addr().String()
	}
	return serve(ctx, srv, ln)
}

// serve runs srv on ln until ctx ends, then shuts it down, letting requests in flight finish.
func serve(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	<-errc // http.ErrServerClosed
	return nil
}
