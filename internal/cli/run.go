package cli

import (
	"context"
	"io"
	"net"
	"net/url"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/internal/relayd"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/streampub"
)

// runSettings are the settings of `walbox run`.
type runSettings struct {
	c                                          *common
	b                                          *brokerSettings
	status, shutdown, createSlot, wait, listen *setting
	otlp, logLevel, logFormat, shards, shardK  *setting
	lanes                                      *setting
	stream                                     *streamSettings
}

func newRunSettings() *runSettings {
	c := newCommon("run")
	s := &c.s
	return &runSettings{c: c, b: brokerSettingsOf(s),
		status: s.get("status-interval"), shutdown: s.get("shutdown-timeout"), createSlot: s.get("create-slot"),
		wait: s.get("wait-for-servers"), listen: s.get("listen"), otlp: s.get("otlp-endpoint"),
		logLevel: s.get("log-level"), logFormat: s.get("log-format"), shards: s.get("shards"), shardK: s.get("shard"),
		lanes: s.get("lanes"), stream: addStreamSettings(s)}
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
	log.Info("starting", "version", build.Version, "slot", rc.Slot, "publication", rc.Publication,
		"table", rc.Table.String(), "message_prefix", rc.MessagePrefix, "exchange", exchange, "window", rc.Window,
		"lanes", cfg.Lanes, "brokers", brokerHosts(cfg), "shard", shardLabel(rc))
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
	var err error
	if cfg.Stream, err = r.stream.config(r.lanes); err != nil {
		return cfg, "", err
	}
	rc, pcfg, err := relayConfig(r.c, r.b, r.status, r.shutdown, r.createSlot, cfg.Stream != nil)
	if err != nil {
		return cfg, "", err
	}
	if cfg.Stream != nil {
		pcfg.Exchange = "stream:" + cfg.Stream.Stream
	} else if cfg.Brokers, err = r.b.endpoints(r.c, "walbox"); err != nil {
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
	if cfg.Stream != nil {
		r.skipBeforeCut(ctx, rc, cfg.Stream)
	}
	if err := r.checkPositions(ctx, rc); err != nil {
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

// checkPositions refuses position ids on rows a row filter selects: the shards of rc, or a
// filter on its publication.
func (r *runSettings) checkPositions(ctx context.Context, rc replication.Config) error {
	st := r.shards
	if st.value == "" {
		st = r.shardK
	}
	if err := checkPositionShards(r.c, rc.Shards, st); err != nil {
		return err
	}
	return connectAndCheckPositions(ctx, rc.DatabaseURL, r.c)
}

// brokerHosts names the nodes the relay publishes to.
func brokerHosts(cfg relayd.Config) string {
	if cfg.Stream != nil {
		var hosts []string
		for _, u := range cfg.Stream.URIs {
			if p, err := url.Parse(u); err == nil {
				hosts = append(hosts, p.Host)
			}
		}
		return strings.Join(hosts, ",")
	}
	return strings.Join(cfg.Brokers.Hosts(), ",")
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

// relayConfig reads the relay's settings; streaming (into a stream, not to the exchange) needs no
// AMQP URL.
func relayConfig(c *common, b *brokerSettings, status, shutdown, createSlot *setting, streaming bool) (replication.Config, publisher.Config, error) {
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
	if streaming {
		pcfg.Window, err = b.window.int()
	} else {
		pcfg, err = b.config(c, "walbox")
	}
	if err != nil {
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
	return cfg, pcfg, nil
}

// skipBeforeCut makes a stream relay of a set that a reshard moves into skip the rows committed
// before the cut (reshardCut). A cut that cannot be read is warned of: rows the old set
// delivers may then be stored twice.
func (r *runSettings) skipBeforeCut(ctx context.Context, rc replication.Config, scfg *streampub.Config) {
	cut, err := reshardCut(ctx, rc, r.c)
	switch {
	case err != nil:
		rc.Logger.Warn("could not read a reshard in progress: rows the old shards deliver may be stored twice",
			"error", redact.Text(err.Error(), r.c.secrets()...))
	case cut > 0:
		scfg.SkipBefore = cut
		rc.Logger.Info("a reshard moves into this relay's set: rows committed before its cut are the old set's, and are not stored again",
			"slot", rc.Slot, "cut", pglogrepl.LSN(cut).String())
	}
}
