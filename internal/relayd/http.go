package relayd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/internal/status"
	"github.com/walbox/walbox/replication"
)

// server serves these endpoints:
//   - /metrics;
//   - /healthz: the process is alive;
//   - /readyz: 200 when streaming, or as a standby with the body "standby";
//   - /status: JSON, status.Relay.
//
// The /readyz endpoint answers 503 otherwise. It answers 503 while the broker blocks publishing,
// with "blocked" in the body. It answers 503 while a row waits for its park queue too.
func (d *Daemon) server() *http.Server {
	stats := d.relay.Stats()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if on, reason := d.blocks.blocked(); on {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: blocked by the broker (%s)\n", reason)
			return
		}
		if q := d.queues.waitingFor(); q != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: a row waits to be parked in queue %s, which cannot be declared\n", q)
			return
		}
		switch st := replication.State(stats.State.Load()); st {
		case replication.StateStreaming:
			if why := d.canaryProblem(); why != "" {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "not ready: %s\n", why)
				return
			}
			fmt.Fprintln(w, "ready: streaming")
		case replication.StateStandby:
			fmt.Fprintln(w, "standby")
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", st)
		}
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(d.status())
	})
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

// canaryProblem says why the canary finds the path broken; "" while it does not, or is off.
func (d *Daemon) canaryProblem() string {
	if d.canary == nil {
		return ""
	}
	return redact.Text(d.canary.Problem(), d.cfg.Secrets...)
}

// status is what the relay is doing, as /status answers.
func (d *Daemon) status() status.Relay {
	s := d.relay.Stats()
	// A publish held up while a row waits for its park queue is no block by the broker.
	blocked := d.blocks.active() || s.Blocked.Load() && d.queues.waitingFor() == ""
	return status.Relay{
		Broker:        d.connected(),
		State:         replication.State(s.State.Load()).String(),
		Slot:          d.cfg.Relay.Slot,
		LastError:     redact.Text(s.LastError(), d.cfg.Secrets...),
		Published:     s.Published.Load(),
		Confirmed:     s.Confirmed.Load(),
		Parked:        s.Parked.Load(),
		InFlight:      s.InFlight.Load(),
		Sessions:      s.Sessions.Load(),
		ConfirmedLSN:  pglogrepl.LSN(s.ConfirmedLSN.Load()).String(),
		ReceivedLSN:   pglogrepl.LSN(s.ReceivedLSN.Load()).String(),
		ServerWALLSN:  pglogrepl.LSN(s.ServerLSN.Load()).String(),
		BrokerBlocked: blocked,
	}
}

// serve serves on ln until ctx ends, then shuts the server down within two seconds. A server
// that stops by itself is logged; the relay goes on without it.
func serve(ctx context.Context, srv *http.Server, ln net.Listener, log *slog.Logger) error {
	log.Info("serving metrics and health", "addr", ln.Addr().String())
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("http server stopped", "error", err)
	}
	<-done
	return nil
}
