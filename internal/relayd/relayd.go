package relayd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/walbox/walbox/canary"
	"github.com/walbox/walbox/metrics"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/schedule"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/wire"
)

// MaxLanes bounds Config.Lanes: each lane is a connection to the broker.
const MaxLanes = 64

// DefaultLanes publishes on one channel, in commit order.
const DefaultLanes = 1

// DefaultListen is the address of the HTTP endpoints unless told otherwise.
const DefaultListen = "127.0.0.1:9187"

// DefaultSlotPoll is how often the slot's retained WAL is read for the metrics by default.
const DefaultSlotPoll = 15 * time.Second

// Config is what the daemon runs.
type Config struct {
	// Relay configures the relay. Its Dial is set to open sessions on Brokers. Its Observer is set
	// to the metrics (and Observer below). Both must be left empty. Its Logger is the daemon's.
	Relay replication.Config
	// Brokers are the RabbitMQ endpoints the sessions dial, the next one after a session is lost.
	// Required.
	Brokers *publisher.Endpoints
	// Stream, when set, makes the sessions publish into a RabbitMQ stream (package streampub). They
	// then do not publish to Brokers, which may be nil. Its Producer and Window are set from the
	// relay's slot and window.
	Stream *streampub.Config
	// Lanes is the number of publishing lanes (publisher.Lanes); 0 or 1 publishes on one channel,
	// in commit order.
	Lanes int
	// Listen is the address of the HTTP endpoints, host:port; "" serves none.
	Listen string
	// Observer, when set, is told of every event as well as the metrics (the span exporter).
	Observer replication.Observer
	// SlotPoll is how often the slot's retained WAL and wal_status are read for the metrics
	// (default DefaultSlotPoll).
	SlotPoll time.Duration
	// Secrets are removed from the last error /status shows.
	Secrets []string
	// Canary is how often the canary is written and read back (package canary); 0 turns it off.
	// Else it is canary.MinInterval or more.
	// Into a stream, the canary is read back from the stream, from its end.
	Canary time.Duration
}

// Daemon is a relay with its metrics, endpoints and slot poller, ready to run once.
type Daemon struct {
	cfg     Config
	relay   *replication.Relay
	reg     *prometheus.Registry
	metrics *metrics.Metrics
	blocks  *blockWatch
	queues  *queueWatch      // the park and alternate queues; its methods take nil (a stream has none)
	sender  *schedule.Sender // sends scheduled messages when due; nil for a stream, which parks them
	canary  *canary.Canary   // nil: off
	// connected names the node the current session is connected to; "" while none is.
	connected func() string
}

// New validates cfg and builds the daemon. An error is a bad setting.
func New(cfg Config) (*Daemon, error) {
	if cfg.Brokers == nil && cfg.Stream == nil {
		return nil, errors.New("relayd: no broker endpoints")
	}
	if cfg.Relay.Dial != nil || cfg.Relay.Observer != nil {
		return nil, errors.New("relayd: the relay's Dial and Observer are set by the daemon")
	}
	if cfg.SlotPoll <= 0 {
		cfg.SlotPoll = DefaultSlotPoll
	}
	d := &Daemon{cfg: cfg, reg: prometheus.NewRegistry()}
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.metrics = metrics.New(d.reg)
	// The defaults (the slot's name, the logger) the poller and endpoints use; New validates.
	rc := cfg.Relay.WithDefaults()
	if cfg.Canary != 0 && cfg.Canary < canary.MinInterval {
		return nil, fmt.Errorf("canary interval %s: want 0 (off) or %s or more", cfg.Canary, canary.MinInterval)
	}
	if cfg.Lanes < 0 || cfg.Lanes > MaxLanes {
		return nil, fmt.Errorf("lanes: %d; want 1 to %d", cfg.Lanes, MaxLanes)
	}
	standby := func() bool { return replication.State(d.relay.Stats().State.Load()) == replication.StateStandby }
	d.blocks = &blockWatch{log: rc.Logger, confirmed: func() uint64 { return d.relay.Stats().Confirmed.Load() },
		standby: standby}
	d.metrics.WatchBlocked(d.blocks.active)
	if cfg.Stream != nil {
		if err := d.dialStream(&rc); err != nil {
			return nil, err
		}
	} else {
		cfg.Brokers.WatchBlocked(d.blocks.observe)
		d.queues = newQueueWatch(rc.Logger, standby)
		cfg.Brokers.WatchQueues(d.queues.observe)
		d.metrics.WatchQueues(d.queues.unavailable, d.queues.parkWaiting)
		rc.Dial = d.scheduling(rc, dialer(cfg.Brokers, cfg.Lanes, rc.Logger))
		d.connected = cfg.Brokers.Connected
	}
	d.metrics.WatchBroker(d.connected)
	if cfg.Canary > 0 {
		if err := d.newCanary(&rc); err != nil {
			return nil, err
		}
	}
	rc.Observer = d.metrics
	if cfg.Observer != nil {
		rc.Observer = observers{d.metrics, cfg.Observer}
	}
	relay, err := replication.New(rc)
	if err != nil {
		return nil, err
	}
	d.relay, d.cfg.Relay = relay, rc
	d.metrics.WatchStats(relay.Stats())
	return d, nil
}

// Stats returns the relay's live counters.
func (d *Daemon) Stats() *replication.Stats { return d.relay.Stats() }

// Run relays until ctx ends or the relay stops with an error, which it returns. It serves the
// endpoints and polls the slot meanwhile, and returns only once all of them stopped.
func (d *Daemon) Run(ctx context.Context) error {
	log := d.cfg.Relay.Logger
	g, ctx := errgroup.WithContext(ctx)
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	if ln := d.listen(); ln != nil {
		srv := d.server()
		g.Go(func() error { return serve(ctx, srv, ln, log) })
	}
	g.Go(func() error {
		slotURL := d.cfg.Relay.DatabaseURL
		if d.cfg.Relay.ReplicationURL != "" {
			slotURL = d.cfg.Relay.ReplicationURL // the slot is the standby's
		}
		d.metrics.PollSlot(ctx, slotURL, d.cfg.Relay.Slot, d.cfg.SlotPoll)
		return nil
	})
	if d.sender != nil {
		g.Go(func() error { return d.sender.Run(ctx) })
	}
	if d.canary != nil {
		g.Go(func() error { return d.canary.Run(ctx) })
	}
	g.Go(func() error {
		defer stop() // the relay is the product: once it stops, the rest has nothing to serve
		return d.relay.Run(ctx)
	})
	if err := g.Wait(); err != nil {
		return err
	}
	st := d.relay.Stats()
	log.Info("exiting", "published", st.Published.Load(), "confirmed", st.Confirmed.Load())
	return nil
}

// newCanary sets the canary up: the relay relays this slot's canaries, the metrics show its age.
func (d *Daemon) newCanary(rc *replication.Config) error {
	tables := make([]wire.Table, len(rc.Mappings))
	for i, m := range rc.Mappings {
		tables[i] = m.Table
	}
	lat := d.metrics.WatchCanary(d.cfg.Canary, func() time.Duration { return d.canary.Age() })
	ccfg := canary.Config{Interval: d.cfg.Canary, DatabaseURL: rc.DatabaseURL, Slot: rc.Slot,
		Publication: rc.Publication, Tables: tables, Logger: rc.Logger, OnLatency: lat,
		Active: func() bool { return replication.State(d.relay.Stats().State.Load()) == replication.StateStreaming }}
	if s := d.cfg.Stream; s != nil {
		// The canary goes into the stream, and is read back from it.
		ccfg.Exchange = s.Stream
		ccfg.Dial = func(ctx context.Context, _ string) (canary.Reader, error) {
			r, err := streampub.DialCanary(ctx, *s)
			if err != nil {
				return nil, err // not a nil *CanaryReader in an interface
			}
			return r, nil
		}
	} else {
		ccfg.Exchange = d.cfg.Brokers.Configs()[0].WithDefaults().Exchange
		ccfg.Dial = func(ctx context.Context, queue string) (canary.Reader, error) {
			r, err := d.cfg.Brokers.DialCanary(ctx, queue)
			if err != nil {
				return nil, err
			}
			return r, nil
		}
	}
	c, err := canary.New(ccfg)
	if err != nil {
		return err
	}
	d.canary, rc.Canary = c, rc.Slot
	return nil
}

// listen takes the HTTP address. Metrics are not the product: an address that cannot be taken
// is logged loudly, and the relay relays anyway.
func (d *Daemon) listen() net.Listener {
	if d.cfg.Listen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", d.cfg.Listen)
	if err != nil {
		d.cfg.Relay.Logger.Error("no metrics or health endpoints; fix --listen (WALBOX_LISTEN)",
			"error", fmt.Errorf("listen on %s: %w", d.cfg.Listen, err))
		return nil
	}
	return ln
}

// observers tells every one of them.
type observers []replication.Observer

func (os observers) Observe(e replication.Event) {
	for _, o := range os {
		o.Observe(e)
	}
}
