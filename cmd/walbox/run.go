package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/metrics"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/replication"
)

func runRelay(ctx context.Context, args []string, _, stderr io.Writer) error {
	c := newCommon()
	b := addBrokerSettings(&c.s)
	status := c.s.add("status-interval", "WALBOX_STATUS_INTERVAL", "1s",
		"how often the confirmed position is reported to PostgreSQL; keep well under wal_sender_timeout")
	shutdown := c.s.add("shutdown-timeout", "WALBOX_SHUTDOWN_TIMEOUT", "10s", "how long to wait for outstanding confirms on shutdown")
	createSlot := c.s.addBool("create-slot", "WALBOX_CREATE_SLOT", "true",
		"create the slot at start if it does not exist (rows committed before that are not covered)")
	wait := c.s.addBool("wait-for-servers", "WALBOX_WAIT_FOR_SERVERS", "false",
		"keep retrying when PostgreSQL or RabbitMQ cannot be reached at start, instead of exiting")
	listen := c.s.add("listen", "WALBOX_LISTEN", "127.0.0.1:9187",
		"address for /metrics, /healthz, /readyz and /status (\"off\" to disable)")
	otlp := c.s.add("otlp-endpoint", "WALBOX_OTLP_ENDPOINT", "", otlpHelp())
	logLevel := c.s.add("log-level", "WALBOX_LOG_LEVEL", "info", "debug, info, warn or error")
	logFormat := c.s.add("log-format", "WALBOX_LOG_FORMAT", "auto", "json, text, or auto (text on a terminal, else json)")
	shards := addShards(&c.s, "the number of shards `walbox migrate --shards` created (default: read from the publications)")
	shardK := c.s.add("shard", "WALBOX_SHARD", "", "stream this shard (0, 1, ...) of the sharded outbox table, from its own slot")

	fs := newFlagSet("run", "Relay outbox inserts from the replication slot to RabbitMQ until SIGINT or SIGTERM", stderr)
	if err := c.parse(fs, args); err != nil {
		return err
	}

	cfg, pcfg, err := relayConfig(c, b, status, shutdown, createSlot)
	if err != nil {
		return err
	}
	eps, err := b.endpoints(c, "walbox")
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, logLevel.value, logFormat.value, c.secrets())
	if err != nil {
		return configError{"--log-level/--log-format: " + err.Error()}
	}
	if cfg.WaitForServers, err = wait.bool(); err != nil {
		return err
	}
	cfg.Logger = log
	if err := applyShard(ctx, &cfg, c, shards, shardK, log); err != nil {
		return err
	}
	cfg.Dial = brokerDialer(eps, log)
	reg := newRegistry()
	m := metrics.New(reg)
	m.WatchBroker(eps.Connected)
	cfg.Observer = m
	if otlp.value != "" {
		tr, stopTracing, err := newTracer(ctx, otlp.value, pcfg.Exchange)
		if err != nil {
			return badSetting(otlp, "%v", err)
		}
		defer stopTracing()
		cfg.Observer = observers{m, tr}
	}
	relay, err := replication.New(cfg)
	if err != nil {
		return configError{err.Error()}
	}
	stats := relay.Stats()
	m.WatchStats(stats)

	ctx, stop := signalContext(ctx, func() { log.Warn("second signal: exiting at once") })
	defer stop()
	if listen.value != "off" && listen.value != "" {
		// Metrics are not the product: a taken port is logged loudly, and the relay relays anyway.
		stopHTTP, err := serveHTTP(ctx, listen.value, newMux(reg, stats, eps.Connected, cfg.Slot, c.secrets()), log)
		if err != nil {
			log.Error("no metrics or health endpoints; fix --listen (WALBOX_LISTEN)", "error", err)
		} else {
			defer stopHTTP()
		}
	}
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	go m.PollSlot(pollCtx, cfg.DatabaseURL, cfg.Slot, 15*time.Second)
	log.Info("starting", "version", version, "slot", cfg.Slot, "publication", cfg.Publication,
		"table", cfg.Table.String(), "message_prefix", cfg.MessagePrefix, "exchange", pcfg.Exchange, "window", cfg.Window,
		"brokers", strings.Join(eps.Hosts(), ","), "shard", shardLabel(cfg))
	if err := relay.Run(ctx); err != nil {
		log.Error("relay stopped", "slot", cfg.Slot, "error", err)
		return errors.New(redact.Text(err.Error(), c.secrets()...))
	}
	st := relay.Stats()
	log.Info("exiting", "published", st.Published.Load(), "confirmed", st.Confirmed.Load())
	return nil
}

func otlpHelp() string {
	help := "OTLP/HTTP URL (http://collector:4318) to export a span per publish to; empty: no tracing"
	if !withTracing {
		help += " (this walbox is built without tracing and refuses it: build with -tags otel)"
	}
	return help
}

// observers tells every one of them.
type observers []replication.Observer

func (os observers) Observe(e replication.Event) {
	for _, o := range os {
		o.Observe(e)
	}
}

func relayConfig(c *common, b *brokerSettings, status, shutdown, createSlot *setting) (replication.Config, publisher.Config, error) {
	var (
		cfg  replication.Config
		pcfg publisher.Config
		err  error
	)
	if cfg.DatabaseURL, err = c.dsn(); err != nil {
		return cfg, pcfg, err
	}
	if cfg.Table, err = c.outboxTable(); err != nil {
		return cfg, pcfg, err
	}
	cfg.Mappings = c.mappings()
	if pcfg, err = b.config(c, "walbox"); err != nil {
		return cfg, pcfg, err
	}
	cfg.Window = pcfg.Window
	if cfg.StatusInterval, err = status.duration(); err != nil {
		return cfg, pcfg, err
	}
	if cfg.ShutdownTimeout, err = shutdown.duration(); err != nil {
		return cfg, pcfg, err
	}
	create, err := createSlot.bool()
	if err != nil {
		return cfg, pcfg, err
	}
	cfg.CreateSlot = &create
	cfg.Slot, cfg.Publication, cfg.MessagePrefix = c.slot.value, c.publication.value, c.messagePrefix.value
	// Validate the rest with a placeholder dialer; the real one is set by the caller.
	probe := cfg
	probe.Dial = func(context.Context) (replication.Publisher, error) { return nil, errors.New("unused") }
	probe.Logger = slog.New(slog.DiscardHandler)
	if err := probe.Validate(); err != nil {
		return cfg, pcfg, configError{err.Error()}
	}
	return cfg, pcfg, nil
}
