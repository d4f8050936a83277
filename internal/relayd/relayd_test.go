package relayd_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/relayd"
	"github.com/walbox/walbox/internal/status"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/replication"
)

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// config returns a daemon's configuration for a fresh migrated database (no slot yet) and an
// exchange of the test's own on the shared broker.
func config(t *testing.T) (relayd.Config, *testenv.Postgres, string) {
	t.Helper()
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL and RabbitMQ")
	}
	pg, rabbit := testenv.SharedPostgres(t), testenv.SharedRabbit(t)
	db, _ := pg.MigratedDatabase(t, migrations.Config{})
	pcfg := publisher.Config{Exchange: testenv.UniqueName("ex"), AppID: "walbox"}
	eps, err := publisher.NewEndpoints(pcfg, []string{rabbit.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return relayd.Config{
		Relay: replication.Config{DatabaseURL: db, Slot: testenv.UniqueName("slot"), StatusInterval: 50 * time.Millisecond,
			MaxBackoff: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))},
		Brokers:  eps,
		SlotPoll: 50 * time.Millisecond,
	}, pg, db
}

// start runs the daemon in the background; the returned channel yields Run's result.
func start(t *testing.T, cfg relayd.Config) (*relayd.Daemon, context.CancelFunc, <-chan error) {
	t.Helper()
	d, err := relayd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done, exited := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(exited)
		done <- d.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-exited
	})
	return d, cancel, done
}

// eventually polls cond until it holds, or fails the test after a while.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitResult(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("Run did not return")
		return nil
	}
}

// The daemon relays a row, serves its endpoints and polls the slot; when its context ends, Run
// returns nil only after the HTTP server is gone.
func TestRunRelaysServesAndStopsEverything(t *testing.T) {
	cfg, pg, db := config(t)
	cfg.Listen = testenv.FreeAddr(t)
	_, cancel, done := start(t, cfg)

	eventually(t, "ready", func() bool { code, _, _ := testenv.HTTPGet(cfg.Listen, "/readyz"); return code == 200 })
	pg.Exec(t, db, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'order.created', '{}')`)
	eventually(t, "the row confirmed in /status", func() bool {
		_, body, err := testenv.HTTPGet(cfg.Listen, "/status")
		var st status.Relay
		return err == nil && json.Unmarshal([]byte(body), &st) == nil && st.Confirmed == 1 && st.State == "streaming" &&
			st.Slot == cfg.Relay.Slot && st.Broker != ""
	})
	eventually(t, "the slot poller's gauge", func() bool {
		_, body, _ := testenv.HTTPGet(cfg.Listen, "/metrics")
		return strings.Contains(body, `walbox_slot_wal_status{wal_status="reserved"} 1`)
	})

	cancel()
	if err := waitResult(t, done); err != nil {
		t.Fatalf("Run after the context ended: %v, want nil", err)
	}
	if _, _, err := testenv.HTTPGet(cfg.Listen, "/healthz"); err == nil {
		t.Error("the HTTP server still answers after Run returned")
	}
}

// A relay that stops with an error ends the daemon: Run returns the error, and the endpoints
// are gone.
func TestRelayFailureEndsAll(t *testing.T) {
	cfg, _, _ := config(t)
	cfg.Listen = testenv.FreeAddr(t)
	no := false
	cfg.Relay.CreateSlot = &no // the slot does not exist: the relay refuses to start
	_, _, done := start(t, cfg)

	err := waitResult(t, done)
	if !errors.Is(err, replication.ErrSlotMissing) {
		t.Fatalf("Run: %v, want ErrSlotMissing", err)
	}
	if _, _, err := testenv.HTTPGet(cfg.Listen, "/healthz"); err == nil {
		t.Error("the HTTP server still answers after the relay failed")
	}
}

// An address that cannot be taken leaves the daemon without endpoints, and the relay relays.
func TestTakenListenAddressDoesNotStopTheRelay(t *testing.T) {
	cfg, _, _ := config(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg.Listen = taken.Addr().String()
	d, cancel, done := start(t, cfg)

	eventually(t, "streaming", func() bool {
		return replication.State(d.Stats().State.Load()) == replication.StateStreaming
	})
	cancel()
	if err := waitResult(t, done); err != nil {
		t.Fatalf("Run: %v, want nil", err)
	}
}

func TestNewRefusesWhatTheDaemonWires(t *testing.T) {
	cfg := relayd.Config{Relay: replication.Config{DatabaseURL: "postgres://localhost/db"}}
	if _, err := relayd.New(cfg); err == nil {
		t.Error("New without broker endpoints: nil error")
	}
	eps, err := publisher.NewEndpoints(publisher.Config{Exchange: "x"}, []string{"amqp://localhost/"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Brokers = eps
	cfg.Relay.Dial = func(context.Context) (replication.Publisher, error) { return nil, errors.New("unused") }
	if _, err := relayd.New(cfg); err == nil {
		t.Error("New with a Dial of the caller's: nil error")
	}
	cfg.Relay.Dial, cfg.Relay.Window = nil, -1
	if _, err := relayd.New(cfg); err == nil {
		t.Error("New with a negative window: nil error")
	}
}
