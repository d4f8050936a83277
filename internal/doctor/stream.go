package doctor

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/internal/streamconn"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/wire"
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
	var checks []Check
	d.eachStreamCheck(ctx, func(c Check) { checks = append(checks, c) })
	return checks
}

// eachStreamCheck is streamChecks, handing each check to emit as it ends.
func (d doctor) eachStreamCheck(ctx context.Context, emit func(Check)) {
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
		emit(failCheck("stream_broker", fix, "RabbitMQ stream at %s: %v", hosts, redactURIs(r.err.Error(), cfg.URIs)))
		return
	}
	emit(passCheck("stream_broker", "RabbitMQ stream at %s accepts the connection", hosts))
	if !r.exists {
		emit(warnCheck("stream", "walbox run declares it with --stream-max-age and --stream-max-bytes; "+
			"declare it yourself for other settings", "stream %s does not exist yet", cfg.Stream))
		return
	}
	emit(passCheck("stream", "stream %s exists", cfg.Stream))
	d.anchorChecks(ctx, emit)
}

// StreamStatus is doctor's stream checks for `walbox status`: the stream's node, the stream, and
// stream_anchor for each relay's slot. It returns within bound: a node that does not answer by
// then fails the stream_broker check. The rest is then not checked.
func StreamStatus(ctx context.Context, cfg Config, bound time.Duration) []Check {
	return withinBound(ctx, bound, streamHosts(cfg.Stream.URIs), newDoctor(cfg).eachStreamCheck)
}

// withinBound runs checks for bound at most; checks hands each check to emit as it ends. It
// returns the checks that ended by then. With none, the stream's node at hosts did not answer.
// Else the slots not checked yet are named by a warning: the verdicts found are kept.
func withinBound(ctx context.Context, bound time.Duration, hosts string, checks func(context.Context, func(Check))) []Check {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	ended := make(chan Check)
	done := make(chan struct{})
	go func() {
		defer close(done)
		checks(ctx, func(c Check) {
			select {
			case ended <- c:
			case <-ctx.Done():
			}
		})
	}()
	var out []Check
	for {
		select {
		case c := <-ended:
			out = append(out, c)
		case <-done:
			return out
		case <-ctx.Done():
			// The checks end with ctx; a peek first has the server stop decoding (PeekSkipped).
			select {
			case <-done:
			case <-time.After(Timeout):
			}
			if len(out) == 0 {
				return []Check{failCheck("stream_broker", "", "RabbitMQ stream at %s: no answer within %v", hosts, bound)}
			}
			return append(out, warnCheck("stream_anchor", "run walbox doctor: it checks each slot with no bound on them all",
				"the stream's last row of the slots not named above was not checked within %v", bound))
		}
	}
}

// anchorFix is the way out of a stream whose last row the server's WAL does not have.
const anchorFix = "point walbox at the server that wrote those rows (the current primary); if they are gone for good, " +
	"publish into a new stream (--stream) or from a new slot"

// AnchorCheck is doctor's stream_anchor check alone, for `walbox recover --dry-run`. It needs
// cfg's DatabaseURL, ReplicationURL, Slot, Publication, Table, Mappings, Prefix and Stream. It
// checks cfg.Slot as its relay runs: a shard's slot (walbox_s0of3) as that shard's.
func AnchorCheck(ctx context.Context, cfg Config) Check {
	d := newDoctor(cfg)
	s, err := d.namedSlot(ctx)
	if err != nil {
		return warnCheck("stream_anchor", "", "cannot check the stream's last row: read the shards: %v", err)
	}
	return d.anchorCheck(ctx, s)
}

// namedSlot finds d's slot among the relays' slots of its base names (streamSlots). So a shard's
// slot comes with its shard and a reshard's cut. Every slot receives every emitted message: a
// shard's relay keeps its shard's only. A slot of no relay is checked as a slot of no shard.
func (d doctor) namedSlot(ctx context.Context) (streamSlot, error) {
	base := d
	base.slot, _ = shard.BaseName(d.slot)
	base.publication, _ = shard.BaseName(d.publication)
	slots, err := base.streamSlots(ctx)
	if err != nil {
		return streamSlot{}, err
	}
	for _, s := range slots {
		if s.slot == d.slot && s.publication == d.publication {
			return s, nil
		}
	}
	return streamSlot{slot: d.slot, publication: d.publication}, nil
}

// anchorChecks runs anchorCheck on the slot of each relay that publishes the outbox table: the
// single slot, and each shard's.
func (d doctor) anchorChecks(ctx context.Context, emit func(Check)) {
	slots, err := d.streamSlots(ctx)
	if err != nil {
		emit(warnCheck("stream_anchor", "", "cannot check the stream's last row: read the shards: %v", err))
		return
	}
	for _, s := range slots {
		emit(d.anchorCheck(ctx, s))
	}
}

// anchorCheck reads the last row walbox run's relay of s stored in the stream, as run does at
// start. It fails, with run's words, when that row is beyond the server's WAL or timeline history.
// The data directory was then restored from an older copy, or an old primary came back. Then it
// peeks the rows the slot replays up to that row. It compares them with the stream, as run does
// when it skips them. A restored server that wrote other rows there fails too.
func (d doctor) anchorCheck(ctx context.Context, s streamSlot) Check {
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
	cfg := streampub.Config{URIs: d.stream.URIs, Stream: d.stream.Stream, Slot: s.slot, SkipBefore: s.cut}
	chk, err := streampub.OpenCheck(cfg, system, sys.DBName)
	if err != nil {
		return warnCheck("stream_anchor", "", "cannot read the stream's last row: %s", redactURIs(err.Error(), d.stream.URIs))
	}
	defer chk.Close()
	tl, lsn, found := chk.Last()
	if !found {
		return passCheck("stream_anchor", "stream %s holds no row of slot %s yet", d.stream.Stream, s.slot)
	}
	err = replication.StreamGap(ctx, conn, tl, lsn, d.standby != "")
	switch {
	case errors.Is(err, replication.ErrAnchorGap):
		return failCheck("stream_anchor", anchorFix, "stream %s: %v", d.stream.Stream, err)
	case err != nil:
		return warnCheck("stream_anchor", "", "cannot check the stream's last row: %v", err)
	}
	last := fmt.Sprintf("the stream's last row of slot %s (timeline %d, %s) is in this server's WAL", s.slot, tl, pglogrepl.LSN(lsn))
	return d.skippedCheck(ctx, conn, s, chk, last)
}

// skippedCheck peeks the rows slot s replays up to the stream's last row (replication.PeekSkipped).
// It compares each with the stream's message at its position. The text last says the anchor
// check passed.
func (d doctor) skippedCheck(ctx context.Context, conn *pgconn.PgConn, s streamSlot, chk *streampub.Check, last string) Check {
	_, lsn, _ := chk.Last()
	rows := 0
	err := replication.PeekSkipped(ctx, conn, replication.PeekConfig{Slot: s.slot, Publication: s.publication,
		Mappings: d.mappings, MessagePrefix: d.prefix, Shards: s.shards, Shard: s.shard, Upto: lsn},
		func(tl int32, lsn uint64, index int, m *wire.Message) (bool, error) {
			past, err := chk.Stored(tl, lsn, index, m)
			if !past {
				rows++
			}
			return past, err
		})
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, streampub.ErrNotStored):
		return failCheck("stream_anchor", anchorFix, "slot %s: %s", s.slot, redactURIs(err.Error(), d.stream.URIs))
	case errors.Is(err, replication.ErrSlotActive):
		return passCheck("stream_anchor", "%s; slot %s is streaming: walbox run compares the rows it skips with the stream itself", last, s.slot)
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		return warnCheck("stream_anchor", "run doctor as a role with REPLICATION, such as walbox run's",
			"%s; this role may not peek slot %s (%s), so the rows it replays up to that row are not compared with the stream", last, s.slot, pgErr.Message)
	case err != nil:
		return warnCheck("stream_anchor", "", "%s; the rows slot %s replays up to it were not compared with the stream: %s",
			last, s.slot, redactURIs(err.Error(), d.stream.URIs))
	}
	return passCheck("stream_anchor", "%s, and the %d rows slot %s replays up to it are the stream's", last, rows, s.slot)
}

// streamSlot is the slot of one relay into the stream: the single slot, or a shard's.
type streamSlot struct {
	slot, publication string
	shards, shard     int
	cut               uint64 // a reshard's cut into the relay's set: rows before it are not this relay's
}

// streamSlots returns the slot of each relay that publishes the outbox table. Each comes with a
// reshard's cut into its set, as walbox run reads it (reshardCut).
func (d doctor) streamSlots(ctx context.Context) ([]streamSlot, error) {
	single := streamSlot{slot: d.slot, publication: d.publication}
	conn, err := pgconnect.Connect(ctx, d.dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	l, err := shard.ReadLayout(ctx, conn, d.table, shard.Set{Slot: d.slot, Publication: d.publication})
	if err != nil {
		return nil, err
	}
	var cut pglogrepl.LSN
	to := 0
	if len(l.Counts()) > 1 {
		sets, err := shard.ReadStates(ctx, conn, nil, l)
		if err != nil {
			return nil, err
		}
		if m, moving, err := shard.FindMove(sets); err != nil {
			return nil, err
		} else if moving {
			cut, to = m.Cut, m.To.Set.N
		}
	}
	var out []streamSlot
	for _, n := range l.Counts() {
		if n == 1 {
			single.cut = uint64(cutFor(cut, to, 1))
			out = append(out, single)
			continue
		}
		set := l.Set(n)
		for k := range n {
			out = append(out, streamSlot{slot: set.SlotName(k), publication: set.PublicationName(k), shards: n, shard: k,
				cut: uint64(cutFor(cut, to, n))})
		}
	}
	if len(out) == 0 {
		out = append(out, single)
	}
	return out, nil
}

// cutFor is a reshard's cut for the set of n shards: the cut if the reshard moves into it (to).
func cutFor(cut pglogrepl.LSN, to, n int) pglogrepl.LSN {
	if to != n {
		return 0
	}
	return cut
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
