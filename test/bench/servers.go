package bench

import (
	"context"
	"fmt"

	"github.com/walbox/walbox/internal/testenv"
)

// Servers are the PostgreSQL and RabbitMQ servers a run uses.
type Servers struct {
	DatabaseURL string // superuser URL of a database in which other databases can be created
	// AMQPURL is the node that the benchmark declares its exchanges and queues on and consumes
	// from; a cluster's first node.
	AMQPURL string
	// StreamURL is the node's rabbitmq-stream URL, for the stream contender; "" without one.
	StreamURL   string
	PostgresPID int // the postmaster, for CPU accounting; 0 if unknown (external server)
	BrokerPID   int // the broker's Erlang VM; 0 if unknown
	// NodeURLs and NodePIDs are every node's URL and Erlang VM when the broker is a cluster,
	// AMQPURL's node first; nil for a single node.
	NodeURLs []string
	NodePIDs []int
}

// brokerURLs returns the URL of every node of the broker.
func (s Servers) brokerURLs() []string {
	if len(s.NodeURLs) > 0 {
		return s.NodeURLs
	}
	return []string{s.AMQPURL}
}

// cluster reports whether the broker is a cluster of several nodes.
func (s Servers) cluster() bool { return len(s.NodeURLs) > 1 }

// sinkType is the type of the queues walbox declares for itself (alternate and park): quorum on a
// cluster, where a classic queue is unavailable while its node is down, as in production.
func (s Servers) sinkType() string {
	if s.cluster() {
		return Quorum
	}
	return Classic
}

// brokerCPU returns the CPU seconds of every node's Erlang VM together, or -1 if one is unknown.
func (s Servers) brokerCPU() float64 {
	pids := s.NodePIDs
	if len(pids) == 0 {
		pids = []int{s.BrokerPID}
	}
	total := 0.0
	for _, pid := range pids {
		cpu := treeCPU(pid)
		if cpu < 0 {
			return -1
		}
		total += cpu
	}
	return total
}

// PostgresOptions are the server settings of a benchmark run, on top of the test harness's
// (wal_level=logical, fsync=off). Full page writes are on as in production; max_wal_size and
// checkpoint_timeout are large enough that no checkpoint falls inside a measured window (each
// trial starts with a CHECKPOINT), so that no contender pays for full-page images the others
// escape.
func PostgresOptions() []testenv.PGOption {
	return []testenv.PGOption{
		testenv.WithSetting("full_page_writes", "on"),
		testenv.WithSetting("shared_buffers", "256MB"),
		testenv.WithSetting("max_wal_size", "8GB"),
		testenv.WithSetting("checkpoint_timeout", "1h"),
	}
}

// ServersOf returns the Servers of servers the test harness started.
func ServersOf(pg *testenv.Postgres, rabbit *testenv.Rabbit) Servers {
	return Servers{DatabaseURL: pg.URL(), AMQPURL: rabbit.URL(), StreamURL: rabbit.StreamURL(), PostgresPID: pg.PID(), BrokerPID: rabbit.PID()}
}

// StartServers starts a throwaway PostgreSQL (wal_level=logical) and RabbitMQ node from the local
// binaries, through the test harness's starters for programs. stop kills them and removes their
// directories; it must be called, also after an error.
func StartServers() (srv Servers, stop func(), err error) {
	return startServers("rabbitmq", func(pg *testenv.Postgres) (Servers, func(), error) {
		rabbit, err := testenv.NewRabbit(testenv.StreamPlugin())
		if err != nil {
			return Servers{}, func() {}, err
		}
		return ServersOf(pg, rabbit), rabbit.Close, nil
	})
}

// startServers starts PostgreSQL, then the broker with broker.
func startServers(what string, broker func(*testenv.Postgres) (Servers, func(), error)) (srv Servers, stop func(), err error) {
	pg, err := testenv.NewPostgres(PostgresOptions()...)
	if err != nil {
		return srv, func() {}, fmt.Errorf("start postgres: %w", err)
	}
	srv, stopBroker, err := broker(pg)
	stop = func() {
		stopBroker()
		pg.Close()
	}
	if err != nil {
		return srv, stop, fmt.Errorf("start %s: %w", what, err)
	}
	return srv, stop, nil
}

// BuildWalbox builds cmd/walbox into dir, with version "bench", and returns the binary's path.
func BuildWalbox(ctx context.Context, dir string) (string, error) {
	bin, err := testenv.BuildIn(ctx, dir, "cmd/walbox", "-ldflags", "-X main.version=bench")
	if err != nil {
		return "", fmt.Errorf("build walbox: %w", err)
	}
	return bin, nil
}
