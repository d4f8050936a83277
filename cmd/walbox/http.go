package main

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
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/replication"
)

// relayStatus is the JSON of /status: what the running relay is doing.
type relayStatus struct {
	State         string `json:"state"`
	Slot          string `json:"slot"`
	LastError     string `json:"last_error,omitempty"`
	Published     uint64 `json:"published"`
	Confirmed     uint64 `json:"confirmed"`
	Parked        uint64 `json:"parked"`
	InFlight      int64  `json:"in_flight"`
	Sessions      uint64 `json:"sessions"`
	ConfirmedLSN  string `json:"confirmed_lsn"`
	ReceivedLSN   string `json:"received_lsn"`
	ServerWALLSN  string `json:"server_wal_lsn"`
	BrokerBlocked bool   `json:"broker_blocked"`
	// Broker is host:port of the RabbitMQ node the relay is connected to; empty when none.
	Broker string `json:"broker"`
}

func statusOf(s *replication.Stats, broker func() string, slot string, secrets []string) relayStatus {
	return relayStatus{
		Broker:        broker(),
		State:         replication.State(s.State.Load()).String(),
		Slot:          slot,
		LastError:     redact.Text(s.LastError(), secrets...),
		Published:     s.Published.Load(),
		Confirmed:     s.Confirmed.Load(),
		Parked:        s.Parked.Load(),
		InFlight:      s.InFlight.Load(),
		Sessions:      s.Sessions.Load(),
		ConfirmedLSN:  pglogrepl.LSN(s.ConfirmedLSN.Load()).String(),
		ReceivedLSN:   pglogrepl.LSN(s.ReceivedLSN.Load()).String(),
		ServerWALLSN:  pglogrepl.LSN(s.ServerLSN.Load()).String(),
		BrokerBlocked: s.Blocked.Load(),
	}
}

// newMux serves /metrics, /healthz (the process is alive), /readyz (200 when streaming, or as a
// standby with the body "standby"; 503 otherwise) and /status (JSON).
// broker returns host:port of the broker node the relay is connected to, or "".
func newMux(reg *prometheus.Registry, stats *replication.Stats, broker func() string, slot string, secrets []string) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch st := replication.State(stats.State.Load()); st {
		case replication.StateStreaming:
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
		_ = enc.Encode(statusOf(stats, broker, slot, secrets))
	})
	return mux
}

// newRegistry holds walbox's metrics plus the Go runtime and process collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// serveHTTP listens on addr until ctx ends. A listen failure is returned at once.
func serveHTTP(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "error", err)
		}
	}()
	log.Info("serving metrics and health", "addr", ln.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}, nil
}
