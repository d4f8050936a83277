package streampub

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/internal/streamconn"
	"github.com/walbox/walbox/wire"
)

// Config configures publishing sessions into a stream.
type Config struct {
	// URIs are the nodes' rabbitmq-stream:// (or rabbitmq-stream+tls://) URIs; the client
	// connects to the first that answers. Required.
	URIs []string
	// Stream is the stream's name. Dial declares it if it is missing. Required.
	Stream string
	// Slot is the replication slot the messages come from. With the database system and the
	// database that Bind is given, it names the producer (ProducerName). Required unless Producer
	// is set.
	Slot string
	// Producer, if set, is the producer's name instead: the key of the broker's deduplication. Dial
	// then declares it at once. It checks no database system and continues from no other name.
	Producer string
	// SkipBefore, if set, is a reshard's cut. The session confirms at once a message whose commit
	// LSN is below it, and sends nothing for it. The old set of shards delivers every row committed
	// before the cut. The new set's slots may hold some of them too.
	SkipBefore uint64
	// MaxAge and MaxBytes are the retention of a stream Dial declares; zero means none.
	MaxAge   time.Duration
	MaxBytes int64
	// Window is the most messages in flight, as the relay's window (default
	// wire.DefaultWindow).
	Window int
	// ConfirmTimeout is how long a message may wait for its confirm before the session is taken
	// for dead (default DefaultConfirmTimeout).
	ConfirmTimeout time.Duration
	// ScanTimeout bounds each wait for messages while Dial reads the stream back to the anchor
	// (default DefaultScanTimeout).
	ScanTimeout time.Duration
}

// ProducerName is the producer's name for a relay streaming from slot in database. The database is
// on the database system system. The name is "walbox-<system>-<slot>-<database>". No other relay
// has it. Each shard has its own slot. Two databases or two clusters differ in the database or the
// system. A slot name has no dash, so the name splits back into its parts.
func ProducerName(system uint64, database, slot string) string {
	return "walbox-" + strconv.FormatUint(system, 10) + "-" + slot + "-" + database
}

// LegacyProducerName is the name walbox gave the producer of slot before ProducerName. It is
// "walbox-<slot>", which every database with that slot name shares. A producer with no message of
// its own continues from this name once (see Bind). It continues from this name's last message of
// its own system.
func LegacyProducerName(slot string) string { return "walbox-" + slot }

// Defaults of Config and of walbox's stream mode.
const (
	// DefaultStream is the stream walbox publishes into unless told otherwise.
	DefaultStream         = "outbox"
	DefaultConfirmTimeout = 30 * time.Second
	DefaultScanTimeout    = 10 * time.Second
)

// ParkStream is the stream that keeps the messages that can never be published into stream.
func ParkStream(stream string) string { return stream + ".parked" }

// WithDefaults returns c with each zero value replaced by its default.
func (c Config) WithDefaults() Config {
	if c.Window == 0 {
		c.Window = wire.DefaultWindow
	}
	if c.ConfirmTimeout <= 0 {
		c.ConfirmTimeout = DefaultConfirmTimeout
	}
	if c.ScanTimeout <= 0 {
		c.ScanTimeout = DefaultScanTimeout
	}
	return c
}

// Validate reports the first bad setting. A zero value stands for its default (WithDefaults).
func (c Config) Validate() error {
	c = c.WithDefaults()
	if len(c.URIs) == 0 {
		return errors.New("stream url: required")
	}
	for _, u := range c.URIs {
		if err := checkURI(u); err != nil {
			return err
		}
	}
	if c.Stream == "" {
		return errors.New("stream: required")
	}
	if c.Producer == "" && c.Slot == "" {
		return errors.New("stream producer: a slot or a producer name is required")
	}
	if c.MaxAge < 0 || c.MaxBytes < 0 {
		return errors.New("stream retention: must not be negative")
	}
	if c.Window < 1 {
		return fmt.Errorf("window %d: must be at least 1", c.Window)
	}
	return nil
}

// ParseURIs splits a comma-separated list of stream URIs and checks each.
func ParseURIs(list string) ([]string, error) {
	var out []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if err := checkURI(u); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, errors.New("no URI")
	}
	return out, nil
}

func checkURI(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("stream url: not a URL") // url's error would print the password
	}
	if u.Scheme != "rabbitmq-stream" && u.Scheme != "rabbitmq-stream+tls" {
		return fmt.Errorf("stream url %s: want rabbitmq-stream:// or rabbitmq-stream+tls://", u.Redacted())
	}
	if u.Host == "" {
		return fmt.Errorf("stream url %s: no host", u.Redacted())
	}
	return nil
}

// Exists reports whether the stream name exists on the nodes of uris. The command walbox recover
// asks it rather than declare a stream. A wrong --stream would take the gap's rows.
func Exists(uris []string, name string) (bool, error) {
	env, err := stream.NewEnvironment(streamconn.Options().SetUris(uris))
	if err != nil {
		return false, fmt.Errorf("connect: %w", wire.ErrSessionClosed) // its error may print the URI
	}
	defer env.Close()
	ok, err := env.StreamExists(name)
	if err != nil {
		return false, fmt.Errorf("stream %s: %w", name, err)
	}
	return ok, nil
}
