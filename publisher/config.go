package publisher

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/internal/redact"
	"github.com/walbox/walbox/wire"
)

// Defaults for the zero values of Config.
const (
	DefaultExchange     = "outbox"
	DefaultWindow       = wire.DefaultWindow
	DefaultAppID        = "walbox"
	DefaultDialTimeout  = 15 * time.Second
	DefaultHeartbeat    = 10 * time.Second
	DefaultCloseTimeout = 5 * time.Second
	DefaultWriteTimeout = 10 * time.Second

	// DefaultMaxMessageSize is RabbitMQ 4.x's default max_message_size (16 MiB), which 3.x (128
	// MiB) accepts too.
	DefaultMaxMessageSize = 16 << 20

	// NoExchange as AlternateExchange publishes without an alternate exchange.
	NoExchange = "none"

	// MaxWindow bounds Window: the notification buffers are sized from it.
	MaxWindow = 1 << 16
)

// Config configures a Session. The zero value of every field but URL selects its default.
type Config struct {
	// URL is the broker address, amqp://user:password@host:port/vhost or amqps://…
	// The password never appears in errors.
	URL string

	// Exchange is the exchange messages are published to, unless a message names its own.
	// Dial declares it as a durable topic exchange. Default "outbox".
	Exchange string

	// AlternateExchange receives messages that no queue is bound for, so they are kept, not
	// returned. Dial declares it (fanout, durable) with a durable queue of the same name bound to
	// it. Dial declares Exchange with it as its alternate-exchange argument. Default
	// Exchange+".unroutable". NoExchange turns it off. Unroutable messages then come back as
	// ErrReturned.
	AlternateExchange string

	// ParkExchange receives the messages Park sets aside. Dial declares it (fanout, durable) with
	// a durable queue of the same name bound to it. Default Exchange+".parked".
	ParkExchange string

	// QueueType is the type of the park and alternate queues Dial declares. It is QueueAuto (the
	// default), QueueClassic or QueueQuorum. Auto is quorum when Endpoints has more than one URL,
	// else classic. Auto uses an existing queue of another type as it is. On a cluster use quorum:
	// a classic queue lives on one node. While that node is down nothing can be parked. A single
	// URL in front of a cluster (a load balancer) needs QueueQuorum. The type of an existing queue
	// cannot change: delete the queue (once empty) to switch. With classic or quorum, an existing
	// queue of the other type fails Dial.
	//
	// Dial does not need the queues. One it cannot declare (its node is down) is declared again
	// every few seconds while the session lives. Park waits until the park queue is declared.
	QueueType string

	// OnQueue, when set, is told of the park and alternate queues (see QueueState):
	//   - the outcome of each of their declarations;
	//   - that a declaration Dial gave up waiting for has no answer yet;
	//   - each time a message waits to be parked.
	//
	// It is called from the session's goroutines and must not block.
	OnQueue func(QueueState)

	// MaxMessageSize is the largest body Publish sends. A larger one is refused with
	// ErrInvalidMessage before anything is written. Otherwise the broker would close the channel.
	// Keep it at or below the broker's max_message_size. Default 16 MiB.
	MaxMessageSize int

	// Window is how many messages the caller keeps in flight (published, not yet confirmed) at
	// most. The session does not count them: the caller bounds them (the relay with its ledger,
	// package checkpoint). It sizes the internal notification buffers, which hold more verdicts
	// than that in an unbounded queue. Default DefaultWindow, at most MaxWindow.
	Window int

	// AppID is the AMQP app-id property of every message and the connection name shown by the
	// broker. Default "walbox".
	AppID string

	// DialTimeout bounds Dial: TCP connect, TLS and AMQP handshakes, channel setup and the
	// exchange declaration. Default 15s.
	DialTimeout time.Duration

	// Heartbeat is the AMQP heartbeat interval proposed to the broker; a heartbeat=N parameter
	// in URL takes precedence. Default 10s.
	Heartbeat time.Duration

	// CloseTimeout bounds Close, after which the connection is cut. Default 5s.
	CloseTimeout time.Duration

	// WriteTimeout bounds each write to the broker's socket. A write that makes no progress for
	// this long fails, the connection is cut and the session ends. A broker that stopped reading
	// without telling causes that (amqp091-go#111). The write ignores every context. A large
	// message that keeps moving is never cut, and brief stalls of flow control pass. Keep it well
	// under PostgreSQL's wal_sender_timeout. The relay cannot answer the server while a write holds
	// it. Default 10s.
	WriteTimeout time.Duration

	// TLS configures amqps connections; nil means the system roots (or the TLS parameters of
	// URL). It is cloned, never modified.
	TLS *tls.Config

	// cluster is set by NewEndpoints when it has more than one URL: QueueAuto is quorum then.
	cluster bool

	// OnBlocked, when set, is told each time the broker blocks the session's connection, and
	// unblocks it. A memory or disk alarm blocks it. The reason is the broker's, from
	// connection.blocked. A session that ends while blocked tells it blocked false, with the reason
	// SessionEnded. It is called from the session's goroutine and must not block.
	OnBlocked func(blocked bool, reason string)
}

// Validate reports the first bad setting. A zero value stands for its default (WithDefaults).
func (c Config) Validate() error {
	c = c.WithDefaults()
	uri, err := parseURL(c.URL)
	if err != nil {
		return err
	}
	switch {
	case c.TLS != nil && uri.Scheme != "amqps":
		return errors.New("tls: set, but url scheme is not amqps")
	case len(c.Exchange) > 255:
		return fmt.Errorf("exchange %.20q...: longer than 255 bytes", c.Exchange)
	case len(c.AlternateExchange) > 255:
		return fmt.Errorf("alternate exchange %.20q...: longer than 255 bytes", c.AlternateExchange)
	case len(c.ParkExchange) > 255:
		return fmt.Errorf("park exchange %.20q...: longer than 255 bytes", c.ParkExchange)
	case c.ParkExchange == c.Exchange || c.AlternateExchange == c.Exchange:
		return fmt.Errorf("park and alternate exchanges must differ from exchange %q", c.Exchange)
	case c.QueueType != QueueAuto && c.QueueType != QueueClassic && c.QueueType != QueueQuorum:
		return fmt.Errorf("queue type %q: want auto, classic or quorum", c.QueueType)
	case c.MaxMessageSize < 0:
		return fmt.Errorf("max message size %d: negative", c.MaxMessageSize)
	case c.Window < 1 || c.Window > MaxWindow:
		return fmt.Errorf("window %d: want 1 to %d", c.Window, MaxWindow)
	case len(c.AppID) > 255:
		return fmt.Errorf("app id %.20q...: longer than 255 bytes", c.AppID)
	case c.DialTimeout < 0:
		return fmt.Errorf("dial timeout %s: negative", c.DialTimeout)
	case c.Heartbeat < 0:
		return fmt.Errorf("heartbeat %s: negative", c.Heartbeat)
	case c.CloseTimeout < 0:
		return fmt.Errorf("close timeout %s: negative", c.CloseTimeout)
	case c.WriteTimeout < 0:
		return fmt.Errorf("write timeout %s: negative", c.WriteTimeout)
	}
	return nil
}

// WithDefaults returns c with each zero value replaced by its default.
func (c Config) WithDefaults() Config {
	if c.Exchange == "" {
		c.Exchange = DefaultExchange
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.AlternateExchange == "" {
		c.AlternateExchange = wire.DefaultAlternateExchange(c.Exchange)
	}
	if c.ParkExchange == "" {
		c.ParkExchange = c.Exchange + ".parked"
	}
	if c.QueueType == "" {
		c.QueueType = DefaultQueueType
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.AppID == "" {
		c.AppID = DefaultAppID
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	return c
}

// parseURL parses an AMQP URL; its error never contains the password.
func parseURL(rawURL string) (amqp.URI, error) {
	if rawURL == "" {
		return amqp.URI{}, errors.New("url: empty")
	}
	uri, err := amqp.ParseURI(rawURL)
	if err != nil {
		return amqp.URI{}, fmt.Errorf("url: %w", redactErr(err, rawURL))
	}
	return uri, nil
}

// redactErr returns err unchanged unless its text contains the password of rawURL. The password may
// be as written or percent-decoded. Then it returns a plain error with each occurrence replaced by
// "xxxxx". The original chain is dropped, since any error in it would print the password.
func redactErr(err error, rawURL string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	found := false
	for _, p := range redact.PasswordForms(rawURL) {
		if strings.Contains(msg, p) {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
			found = true
		}
	}
	if !found {
		return err
	}
	return errors.New(msg)
}

// host returns host:port of a parsed URL, for error context.
func host(uri amqp.URI) string {
	return fmt.Sprintf("%s:%d", uri.Host, uri.Port)
}
