package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"

	"github.com/walbox/walbox/internal/relayd"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/replication"
)

// runSettings are the settings of `walbox run`.
type runSettings struct {
	c                                          *common
	b                                          *brokerSettings
	status, shutdown, createSlot, wait, listen *setting
	otlp, logLevel, logFormat, shards, shardK  *setting
	lanes                                      *setting
}

func newRunSettings() *runSettings {
	c := newCommon()
	r := &runSettings{c: c, b: addBrokerSettings(&c.s)}
	c.addFailoverSlot()
	c.addReplicationURL()
	r.status = c.s.add("status-interval", "WALBOX_STATUS_INTERVAL", "1s",
		"how often the confirmed position is reported to PostgreSQL; keep well under wal_sender_timeout")
	r.shutdown = c.s.add("shutdown-timeout", "WALBOX_SHUTDOWN_TIMEOUT", "10s", "how long to wait for outstanding confirms on shutdown")
	r.createSlot = c.s.addBool("create-slot", "WALBOX_CREATE_SLOT", "true",
		"create the slot at start if it does not exist (rows committed before that are not covered)")
	r.wait = c.s.addBool("wait-for-servers", "WALBOX_WAIT_FOR_SERVERS", "false",
		"keep retrying when PostgreSQL or RabbitMQ cannot be reached at start, instead of exiting")
	r.listen = c.s.add("listen", "WALBOX_LISTEN", "127.0.0.1:9187",
		"address for /metrics, /healthz, /readyz and /status (\"off\" to disable)")
	r.otlp = c.s.add("otlp-endpoint", "WALBOX_OTLP_ENDPOINT", "", otlpHelp())
	r.logLevel = c.s.add("log-level", "WALBOX_LOG_LEVEL", "info", "debug, info, warn or error")
	r.logFormat = c.s.add("log-format", "WALBOX_LOG_FORMAT", "auto", "json, text, or auto (text on a terminal, else json)")
	r.shards = addShards(&c.s, "the number of shards `walbox migrate --shards` created (default: read from the publications)")
	r.shardK = c.s.add("shard", "WALBOX_SHARD", "", "stream this shard (0, 1, ...) of the sharded outbox table, from its own slot")
	r.lanes = c.s.add("lanes", "WALBOX_LANES", "1", "publish over this many channels, each on its own connection, "+
		"by a hash of the aggregate id: each aggregate's messages keep their commit order, different aggregates' need not (1: commit order)")
	return r
}

// runRelay is `walbox run`: settings, then the daemon's configuration, then the daemon.
func runRelay(ctx context.Context, args []string, _, stderr io.Writer) error {
	r := newRunSettings()
	fs := newFlagSet("run", "Relay outbox inserts from the replication slot to RabbitMQ until SIGINT or SIGTERM", stderr)
	if err := r.c.parse(fs, args); err != nil {
		return err
	}
	cfg, exchange, err := r.config(ctx, stderr)
	if err != nil {
		return err
	}
	log := cfg.Relay.Logger
	if r.otlp.value != "" {
		tr, stopTracing, err := newTracer(ctx, r.otlp.value, exchange)
		if err != nil {
			return badSetting(r.otlp, "%v", err)
		}
		defer stopTracing()
		cfg.Observer = tr
	}
	d, err := relayd.New(cfg)
	if err != nil {
		return configError{err.Error()}
	}
	ctx, stop := signalContext(ctx, func() { log.Warn("second signal: exiting at once") })
	defer stop()
	rc := cfg.Relay
	log.Info("starting", "version", version, "slot", rc.Slot, "publication", rc.Publication,
		"table", rc.Table.String(), "message_prefix", rc.MessagePrefix, "exchange", exchange, "window", rc.Window,
		"lanes", cfg.Lanes, "brokers", strings.Join(cfg.Brokers.Hosts(), ","), "shard", shardLabel(rc))
	if err := d.Run(ctx); err != nil {
		log.Error("relay stopped", "slot", rc.Slot, "error", explainAuth(err))
		return r.c.fail(err)
	}
	return nil
}

// config turns the settings into the daemon's configuration, with its logger writing to stderr;
// it returns the exchange too, which the tracer names.
func (r *runSettings) config(ctx context.Context, stderr io.Writer) (relayd.Config, string, error) {
	var cfg relayd.Config
	rc, pcfg, err := relayConfig(r.c, r.b, r.status, r.shutdown, r.createSlot)
	if err != nil {
		return cfg, "", err
	}
	if cfg.Brokers, err = r.b.endpoints(r.c, "walbox"); err != nil {
		return cfg, "", err
	}
	if rc.Logger, err = newLogger(stderr, r.logLevel.value, r.logFormat.value, r.c.secrets()); err != nil {
		return cfg, "", configError{"--log-level/--log-format: " + err.Error()}
	}
	if rc.WaitForServers, err = r.wait.bool(); err != nil {
		return cfg, "", err
	}
	if err := checkListen(r.listen); err != nil {
		return cfg, "", err
	}
	if err := applyShard(ctx, &rc, r.c, r.shards, r.shardK, rc.Logger); err != nil {
		return cfg, "", err
	}
	if cfg.Lanes, err = r.lanes.int(); err != nil {
		return cfg, "", err
	}
	if cfg.Lanes < 1 || cfg.Lanes > relayd.MaxLanes {
		return cfg, "", badSetting(r.lanes, "%d; want 1 to %d", cfg.Lanes, relayd.MaxLanes)
	}
	cfg.Relay, cfg.Secrets = rc, r.c.secrets()
	if r.listen.value != "off" {
		cfg.Listen = r.listen.value
	}
	return cfg, pcfg.Exchange, nil
}

// checkListen refuses a --listen that is not "off" and not host:port. An address that is well
// formed but taken is only logged when the relay starts: metrics are not the product.
func checkListen(st *setting) error {
	if st.value == "off" || st.value == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(st.value)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return badSetting(st, "%v; want host:port, such as 127.0.0.1:9187 (or \"off\")", err)
	}
	return nil
}

func otlpHelp() string {
	help := "OTLP/HTTP URL (http://collector:4318) to export a span per publish to; empty: no tracing"
	if !withTracing {
		help += " (this walbox is built without tracing and refuses it: build with -tags otel)"
	}
	return help
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
	if cfg.FailoverSlot, err = c.failover(); err != nil {
		return cfg, pcfg, err
	}
	if cfg.ReplicationURL, err = c.replicationDSN(); err != nil {
		return cfg, pcfg, err
	}
	cfg.Slot, cfg.Publication, cfg.MessagePrefix = c.slot.value, c.publication.value, c.messagePrefix.value
	// Validate the rest with a placeholder dialer; the daemon sets the real one.
	probe := cfg
	probe.Dial = func(context.Context) (replication.Publisher, error) { return nil, errors.New("unused") }
	probe.Logger = slog.New(slog.DiscardHandler)
	if err := probe.Validate(); err != nil {
		return cfg, pcfg, configError{err.Error()}
	}
	return cfg, pcfg, nil
}
