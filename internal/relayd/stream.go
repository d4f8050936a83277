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

// dialStream makes rc's sessions publish into the stream. The producer is named after the database
// system, the database and the slot. Each session is checked at its start for what the stream has
// already.
func (d *Daemon) dialStream(rc *replication.Config) error {
	scfg := *d.cfg.Stream
	scfg.Slot, scfg.Window = rc.Slot, rc.Window
	if err := scfg.Validate(); err != nil {
		return err
	}
	log := rc.Logger
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
	sd.mu.Lock()
	sd.current = s
	sd.mu.Unlock()
	return &streamSession{Session: s, sd: sd}, nil
}

// streamSession is a session that logs what it continues from once the relay bound it.
type streamSession struct {
	*streampub.Session
	sd *streamDialer
}

func (s *streamSession) Bind(ctx context.Context, system uint64, database string) error {
	if err := s.Session.Bind(ctx, system, database); err != nil {
		return err
	}
	log, stream := s.sd.log, s.sd.cfg.Stream
	name, continued := s.Producer()
	id, pos, found := s.Anchor()
	log.Info("connected to stream", "broker", s.sd.hosts(), "stream", stream, "producer", name,
		"last_publishing_id", id, "last_position", pos.String(), "last_found", found)
	if continued != "" {
		log.Info("the producer has no message of its own yet: it continues from this system's last message under the name walbox used before",
			"stream", stream, "producer", name, "previous_producer", continued, "last_publishing_id", id, "last_position", pos.String())
	}
	if id > 0 && !found {
		log.Warn("the stream no longer holds the producer's last message (retention?): rows the slot replays are stored again",
			"stream", stream, "producer", name, "last_publishing_id", id)
	}
	return nil
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

// clientLog sends the stream client's own logs to the daemon's, at debug level. The errors that
// matter reach the relay as session errors.
type clientLog struct{ log *slog.Logger }

func (c clientLog) Info(msg string, v ...any)  { c.debug(msg, v) }
func (c clientLog) Error(msg string, v ...any) { c.debug(msg, v) }
func (c clientLog) Debug(msg string, v ...any) { c.debug(msg, v) }
func (c clientLog) Warn(msg string, v ...any)  { c.debug(msg, v) }

func (c clientLog) debug(msg string, v []any) {
	c.log.Debug("stream client: " + fmt.Sprintf(msg, v...))
}
