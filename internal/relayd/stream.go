package relayd

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"sync"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/logs"

	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/streampub"
)

// dialStream makes rc's sessions publish into the stream: a producer named after the slot, each
// session checked at its start for what the stream has already.
func (d *Daemon) dialStream(rc *replication.Config) error {
	if rc.Slot == "" {
		rc.Slot = "walbox" // replication's default, which names the producer
	}
	scfg := *d.cfg.Stream
	scfg.Producer, scfg.Window = streampub.ProducerName(rc.Slot), rc.Window
	if err := scfg.Validate(); err != nil {
		return err
	}
	log := rc.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	logs.SetLogger(clientLog{log})
	sd := &streamDialer{cfg: scfg, log: log}
	rc.Dial, d.connected = sd.dial, sd.node
	return nil
}

// streamDialer opens stream sessions and remembers which node the last one reached.
type streamDialer struct {
	cfg streampub.Config
	log *slog.Logger

	mu      sync.Mutex
	current *streampub.Session
}

func (sd *streamDialer) dial(ctx context.Context) (replication.Publisher, error) {
	s, err := streampub.Dial(ctx, sd.cfg)
	if err != nil {
		return nil, err
	}
	id, pos, found := s.Anchor()
	sd.log.Info("connected to stream", "broker", sd.hosts(), "stream", sd.cfg.Stream, "producer", sd.cfg.Producer,
		"last_publishing_id", id, "last_position", pos.String(), "last_found", found)
	if id > 0 && !found {
		sd.log.Warn("the stream no longer holds the producer's last message (retention?): rows the slot replays are stored again",
			"stream", sd.cfg.Stream, "producer", sd.cfg.Producer, "last_publishing_id", id)
	}
	sd.mu.Lock()
	sd.current = s
	sd.mu.Unlock()
	return s, nil
}

// node returns the hosts of the stream URIs while a session is open, else "".
func (sd *streamDialer) node() string {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	if sd.current == nil || sd.current.Ended() {
		return ""
	}
	return sd.hosts()
}

func (sd *streamDialer) hosts() string {
	u, err := url.Parse(sd.cfg.URIs[0])
	if err != nil {
		return ""
	}
	return u.Host
}

// clientLog sends the stream client's own logs to the daemon's, at debug level: the errors that
// matter reach the relay as session errors.
type clientLog struct{ log *slog.Logger }

func (c clientLog) Info(msg string, v ...any)  { c.debug(msg, v) }
func (c clientLog) Error(msg string, v ...any) { c.debug(msg, v) }
func (c clientLog) Debug(msg string, v ...any) { c.debug(msg, v) }
func (c clientLog) Warn(msg string, v ...any)  { c.debug(msg, v) }

func (c clientLog) debug(msg string, v []any) {
	c.log.Debug("stream client: " + fmt.Sprintf(msg, v...))
}
