// Command demo runs the whole example on one machine without Docker: a throwaway PostgreSQL
// (wal_level=logical) and RabbitMQ node started from the local binaries, `walbox migrate` and
// `walbox run`, the order service and the notification service, and a stream of orders placed
// over HTTP. It prints progress once a second and stops on Ctrl-C, or after -duration, leaving
// nothing running.
//
//	make demo                                  # from the repository's top folder
//	cd examples && go run ./cmd/demo [-rate 50] [-duration 30s]
//
// Run it from inside the examples module: it builds the services with `go build`. It finds
// PostgreSQL 15 or later and RabbitMQ through WALBOX_PG_BIN and WALBOX_RABBITMQ_BIN, on PATH,
// through `pg_config --bindir`, or in the usual Debian and Homebrew folders, and prints which
// it uses. Where one is missing, it says so in one line and points to `docker compose up`.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

type config struct {
	rate     int
	duration time.Duration
	drain    time.Duration
}

func main() {
	var cfg config
	flag.IntVar(&cfg.rate, "rate", 50, "orders placed per second")
	flag.DurationVar(&cfg.duration, "duration", 0, "stop placing orders after this long (0: until Ctrl-C)")
	flag.DurationVar(&cfg.drain, "drain", 30*time.Second, "how long to wait at the end for every order to be notified")
	flag.Parse()
	if cfg.rate < 1 || cfg.duration < 0 || cfg.drain < 0 {
		fmt.Fprintln(os.Stderr, "demo: -rate must be positive, -duration and -drain not negative")
		os.Exit(2)
	}
	if err := run(cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// run runs the demo. The first SIGINT or SIGTERM stops placing orders and drains; a second
// skips the drain. Everything started is stopped before run returns.
func run(cfg config, out io.Writer) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	drainCtx, cancelDrain := context.WithCancel(context.Background())
	defer cancelDrain()
	go func() {
		<-sigs
		fmt.Fprintln(out, "demo: interrupted: stopping (Ctrl-C again to skip the drain)")
		cancel()
		<-sigs
		cancelDrain()
	}()

	bins, err := findBinaries()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "demo: PostgreSQL %s programs in %s\n", bins.pgVersion, bins.pg)
	fmt.Fprintf(out, "demo: RabbitMQ programs in %s\n", bins.rabbit)
	dir, err := os.MkdirTemp("", "walbox-demo-")
	if err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	defer os.RemoveAll(dir)
	return demo(ctx, drainCtx, cfg, dir, bins, out)
}
