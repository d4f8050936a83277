package doctor

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/internal/streamconn"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/streampub"
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
	checks = append(checks, passCheck("stream", "stream %s exists", cfg.Stream))
	return append(checks, d.anchorCheck(ctx))
}

// anchorFix is the way out of a stream whose last row the server's WAL does not have.
const anchorFix = "point walbox at the server that wrote those rows (the current primary); if they are gone for good, " +
	"publish into a new stream (--stream) or from a new slot"

// AnchorCheck is doctor's stream_anchor check alone, for `walbox recover --dry-run`. It needs
// cfg's DatabaseURL, ReplicationURL, Slot and Stream.
func AnchorCheck(ctx context.Context, cfg Config) Check {
	d := doctor{dsn: cfg.DatabaseURL, slot: cfg.Slot, standby: cfg.ReplicationURL, stream: cfg.Stream}
	return d.anchorCheck(ctx)
}

// anchorCheck reads the last row walbox run's relay stored in the stream, as run does at start. It
// fails, with run's words, when that row is beyond the server's WAL or timeline history. The data
// directory was then restored from an older copy, or an old primary came back.
func (d doctor) anchorCheck(ctx context.Context) Check {
	ctx, cancel := context.WithTimeout(ctx, 3*Timeout)
	defer cancel()
	conn, err := d.replicationConn(ctx)
	if err != nil {
		return warnCheck("stream_anchor", "see the replication_connection check", "cannot check the stream's last row: %v", err)
	}
	defer conn.Close(context.Background())
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return warnCheck("stream_anchor", "see the replication_connection check", "cannot check the stream's last row: identify system: %v", err)
	}
	system, err := strconv.ParseUint(sys.SystemID, 10, 64)
	if err != nil {
		return warnCheck("stream_anchor", "", "cannot check the stream's last row: system identifier %q: %v", sys.SystemID, err)
	}
	cfg := streampub.Config{URIs: d.stream.URIs, Stream: d.stream.Stream, Slot: d.slot}
	tl, lsn, found, err := streampub.LastStored(cfg, system, sys.DBName)
	if err != nil {
		return warnCheck("stream_anchor", "", "cannot read the stream's last row: %s", redactURIs(err.Error(), d.stream.URIs))
	}
	if !found {
		return passCheck("stream_anchor", "stream %s holds no row of slot %s yet", d.stream.Stream, d.slot)
	}
	err = replication.StreamGap(ctx, conn, tl, lsn, d.standby != "")
	switch {
	case errors.Is(err, replication.ErrAnchorGap):
		return failCheck("stream_anchor", anchorFix, "stream %s: %v", d.stream.Stream, err)
	case err != nil:
		return warnCheck("stream_anchor", "", "cannot check the stream's last row: %v", err)
	}
	return passCheck("stream_anchor", "the stream's last row of slot %s (timeline %d, %s) is in this server's WAL",
		d.slot, tl, pglogrepl.LSN(lsn))
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
