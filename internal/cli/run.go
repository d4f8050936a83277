package cli

import (
	"context"
	"io"
	"net/url"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/canary"
	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/internal/relayd"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/streampub"
)

// runRelay is `walbox run`: settings, then the daemon's configuration, then, once signals are
// handled, the shard's place and the daemon.
func runRelay(ctx context.Context, args []string, _, stderr io.Writer) error {
	c := newCommon("run")
	fs := newFlagSet("run", "Relay outbox inserts from the replication slot to RabbitMQ until SIGINT or SIGTERM", stderr)
	if err := c.parse(fs, args); err != nil {
		return err
	}
	cfg, exchange, err := relayConfig(c, stderr)
	if err != nil {
		return err
	}
	log := cfg.Relay.Logger
	if c.v.otlp != "" {
		tr, stopTracing, err := newTracer(ctx, c.v.otlp, exchange)
		if err != nil {
			return badSetting(c.s.get("otlp-endpoint"), "%v", err)
		}
		defer stopTracing()
		cfg.Observer = tr
	}
	ctx, stop := signalContext(ctx, func() { log.Warn("second signal: exiting at once") })
	defer stop()
	if err := placeRelay(ctx, c, &cfg); err != nil || ctx.Err() != nil {
		return stoppedEarly(ctx, err)
	}
	d, err := relayd.New(cfg)
	if err != nil {
		return configError{err.Error()}
	}
	rc := cfg.Relay
	log.Info("starting", "version", build.Version, "slot", rc.Slot, "publication", rc.Publication,
		"table", rc.Table.String(), "message_prefix", rc.MessagePrefix, "exchange", exchange, "window", rc.Window,
		"lanes", cfg.Lanes, "brokers", brokerHosts(cfg), "shard", shardLabel(rc))
	if err := d.Run(ctx); err != nil {
		log.Error("relay stopped", "slot", rc.Slot, "error", explainAuth(err))
		return c.fail(err)
	}
	return nil
}

// relayConfig turns run's settings into the daemon's configuration; its logger writes to stderr.
// It returns the exchange too, which the tracer names. It reads no server: placeRelay does.
func relayConfig(c *common, stderr io.Writer) (relayd.Config, string, error) {
	cfg := c.v.daemon
	cfg.Relay, cfg.Secrets = c.v.relay, c.secrets()
	cfg.Relay.Mappings = c.mappings()
	var (
		exchange string
		err      error
	)
	if cfg.Stream, err = streamConfig(c); err != nil {
		return cfg, "", err
	}
	// After streamConfig: into a stream, more than one lane is refused as such.
	if cfg.Lanes > relayd.MaxLanes {
		return cfg, "", badSetting(c.s.get("lanes"), "%d; want 1 to %d", cfg.Lanes, relayd.MaxLanes)
	}
	if cfg.Stream != nil {
		exchange = "stream:" + cfg.Stream.Stream
	} else if cfg.Brokers, err = c.brokers("walbox"); err != nil {
		return cfg, "", err
	} else {
		exchange = cfg.Brokers.Configs()[0].Exchange
	}
	// The slot's name is checked before any server is read. An empty one is the default.
	// relayd.New checks it again later. Otherwise a bad name waits for the servers, with
	// --wait-for-servers for good.
	if err := slots.CheckName(cfg.Relay.WithDefaults().Slot); err != nil {
		return cfg, "", configError{err.Error()}
	}
	if cfg.Relay.Logger, err = newLogger(stderr, c.v.logLevel, c.v.logFormat, c.secrets()); err != nil {
		return cfg, "", configError{"--log-level/--log-format: " + err.Error()}
	}
	if cfg.Canary != 0 && cfg.Canary < canary.MinInterval {
		return cfg, "", badSetting(c.s.get("canary-interval"), "%s; want 0 (off) or %s or more", cfg.Canary, canary.MinInterval)
	}
	if c.v.shard < 0 && c.v.shards > 1 {
		return cfg, "", badSetting(c.s.get("shard"), "required with --shards %d: which shard this relay streams", c.v.shards)
	}
	return cfg, exchange, nil
}

// placeRelay reads where the relay streams: its shard's slot and publication (applyShard). It
// reads the cut a stream relay skips to, and checks tables whose ids are positions.
func placeRelay(ctx context.Context, c *common, cfg *relayd.Config) error {
	rc := &cfg.Relay
	if err := applyShard(ctx, rc, c); err != nil {
		return err
	}
	if cfg.Stream != nil {
		skipBeforeCut(ctx, c, *rc, cfg.Stream)
	}
	st := c.s.get("shards")
	if st.value == "" {
		st = c.s.get("shard")
	}
	if err := checkPositionShards(c, rc.Shards, st); err != nil {
		return err
	}
	return connectAndCheckPositions(ctx, rc.DatabaseURL, c)
}

// stoppedEarly is run's result when a signal or an error came before the relay started. A
// signal is a stop like any other.
func stoppedEarly(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
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

// skipBeforeCut serves a stream relay of a set that a reshard moves into. The relay skips the
// rows committed before the cut (reshardCut). A cut that cannot be read is warned of: rows the old set
// delivers may then be stored twice.
func skipBeforeCut(ctx context.Context, c *common, rc replication.Config, scfg *streampub.Config) {
	cut, err := reshardCut(ctx, rc, c)
	switch {
	case err != nil:
		rc.Logger.Warn("could not read a reshard in progress: rows the old shards deliver may be stored twice",
			"error", redact.Text(err.Error(), c.secrets()...))
	case cut > 0:
		scfg.SkipBefore = cut
		rc.Logger.Info("a reshard moves into this relay's set: rows committed before its cut are the old set's, and are not stored again",
			"slot", rc.Slot, "cut", pglogrepl.LSN(cut).String())
	}
}
