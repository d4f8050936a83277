package doctor

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/internal/streamconn"
)

// StreamConfig is `walbox run`'s stream mode (--stream-url): the nodes and the stream.
type StreamConfig struct {
	URIs   []string
	Stream string
}

// StreamRecoverPlan is what `walbox recover --stream-url` does with a lost slot's gap, in the
// words doctor's fix and `recover --dry-run` both use.
func StreamRecoverPlan(stream string) string {
	return fmt.Sprintf("publishes into stream %s, exactly once, the rows that may have committed after the recorded position, "+
		"less those the stream holds already (found by message id), numbered as the relay numbers them", stream)
}

// recoverFix is the fix of a lost slot: `walbox recover`, with the stream of --stream-url.
func (d doctor) recoverFix() string {
	if d.stream == nil {
		return "run `walbox recover` (it republishes the rows committed since from the outbox table)"
	}
	return fmt.Sprintf("run `walbox recover --stream-url ... --stream %s` (it %s)", d.stream.Stream, StreamRecoverPlan(d.stream.Stream))
}

// streamChecks connects to the stream nodes as `walbox run` does and says whether the stream is
// there. A missing stream is a warning: run declares it, with its retention settings.
func (d doctor) streamChecks(ctx context.Context) []Check {
	cfg := d.stream
	hosts := streamHosts(cfg.URIs)
	type result struct {
		exists bool
		err    error
	}
	done := make(chan result, 1)
	go func() {
		env, err := stream.NewEnvironment(streamconn.Options().SetUris(cfg.URIs))
		if err != nil {
			done <- result{err: err}
			return
		}
		defer env.Close()
		ok, err := env.StreamExists(cfg.Stream)
		done <- result{ok, err}
	}()
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		r.err = fmt.Errorf("no answer within %v", Timeout)
	}
	fix := "enable the rabbitmq_stream plugin with a stream listener (docs/streams.md), and check --stream-url " +
		"and the user's permissions on the vhost"
	if r.err != nil {
		return []Check{failCheck("stream_broker", fix, "RabbitMQ stream at %s: %v", hosts, redactURIs(r.err.Error(), cfg.URIs))}
	}
	checks := []Check{passCheck("stream_broker", "RabbitMQ stream at %s accepts the connection", hosts)}
	if !r.exists {
		return append(checks, warnCheck("stream", "walbox run declares it with --stream-max-age and --stream-max-bytes; "+
			"declare it yourself for other settings", "stream %s does not exist yet", cfg.Stream))
	}
	return append(checks, passCheck("stream", "stream %s exists", cfg.Stream))
}

// streamHosts names the nodes of uris, without their credentials.
func streamHosts(uris []string) string {
	var hosts []string
	for _, u := range uris {
		if p, err := url.Parse(u); err == nil {
			hosts = append(hosts, p.Host)
		}
	}
	return strings.Join(hosts, ",")
}

// redactURIs removes the URIs, which may hold a password, from a client error.
func redactURIs(msg string, uris []string) string {
	for _, u := range uris {
		msg = strings.ReplaceAll(msg, u, "<stream url>")
	}
	return msg
}
