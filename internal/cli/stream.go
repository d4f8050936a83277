package cli

import (
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/logs"

	"github.com/walbox/walbox/streampub"
)

// streamConfig returns the stream publisher's configuration of `walbox run`, or nil when
// --stream-url is not set. A stream setting other than its default without --stream-url is
// refused: the relay would publish to the exchange. So are several lanes: a stream takes one
// producer.
func streamConfig(c *common) (*streampub.Config, error) {
	if len(c.v.stream.URIs) == 0 {
		for _, name := range []string{"stream", "stream-max-age", "stream-max-bytes"} {
			if st := c.s.get(name); st.value != "" && st.value != st.def {
				return nil, badSetting(st, "only with --stream-url; without it walbox publishes to the exchange")
			}
		}
		return nil, nil
	}
	if n := c.v.daemon.Lanes; n > 1 {
		return nil, badSetting(c.s.get("lanes"), "%d; a stream takes one producer, in commit order: leave it at 1 with --stream-url", n)
	}
	cfg := c.v.stream
	if cfg.Stream == "" {
		return nil, badSetting(c.s.get("stream"), "required with --stream-url")
	}
	return &cfg, nil
}

// quietStreamClient drops the stream client's own log lines, which it prints to stdout. It serves
// the commands that print their own results: the errors that matter reach them as errors.
type quietStreamClient struct{}

func (quietStreamClient) Info(string, ...any)  {}
func (quietStreamClient) Error(string, ...any) {}
func (quietStreamClient) Debug(string, ...any) {}
func (quietStreamClient) Warn(string, ...any)  {}

var _ logs.Logger = quietStreamClient{}
