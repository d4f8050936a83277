package cli

import (
	"strconv"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/logs"

	"github.com/walbox/walbox/streampub"
)

// streamSettings are the settings of `walbox run` that publish into a RabbitMQ stream instead of
// to the exchange.
type streamSettings struct {
	url, name, maxAge, maxBytes *setting
}

func addStreamSettings(s *settings) *streamSettings {
	return &streamSettings{url: s.get("stream-url"), name: s.get("stream"), maxAge: s.get("stream-max-age"),
		maxBytes: s.get("stream-max-bytes")}
}

// config returns the stream publisher's configuration, or nil when --stream-url is not set. A
// stream setting other than its default without --stream-url is refused: the relay would publish
// to the exchange.
// So are several lanes: a stream takes one producer.
func (s *streamSettings) config(lanes *setting) (*streampub.Config, error) {
	if s.url.value == "" {
		for _, st := range []*setting{s.name, s.maxAge, s.maxBytes} {
			if st.value != "" && st.value != st.def {
				return nil, badSetting(st, "only with --stream-url; without it walbox publishes to the exchange")
			}
		}
		return nil, nil
	}
	if n, err := lanes.int(); err == nil && n > 1 {
		return nil, badSetting(lanes, "%d; a stream takes one producer, in commit order: leave it at 1 with --stream-url", n)
	}
	uris, err := streampub.ParseURIs(s.url.value)
	if err != nil {
		return nil, badSetting(s.url, "%v", err)
	}
	cfg := &streampub.Config{URIs: uris, Stream: s.name.value}
	if cfg.Stream == "" {
		return nil, badSetting(s.name, "required with --stream-url")
	}
	if s.maxAge.value != "" {
		if cfg.MaxAge, err = s.maxAge.duration(); err != nil {
			return nil, err
		}
	}
	if s.maxBytes.value != "" {
		n, err := strconv.ParseInt(s.maxBytes.value, 10, 64)
		if err != nil || n < 1 {
			return nil, badSetting(s.maxBytes, "%q is not a positive number of bytes", s.maxBytes.value)
		}
		cfg.MaxBytes = n
	}
	return cfg, nil
}

// quietStreamClient drops the stream client's own log lines, which it prints to stdout, for the
// commands that print their own results: the errors that matter reach them as errors.
type quietStreamClient struct{}

func (quietStreamClient) Info(string, ...any)  {}
func (quietStreamClient) Error(string, ...any) {}
func (quietStreamClient) Debug(string, ...any) {}
func (quietStreamClient) Warn(string, ...any)  {}

var _ logs.Logger = quietStreamClient{}
