package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/walbox/walbox/internal/replay"
	"github.com/walbox/walbox/wire"
)

const replaySummary = "Republish rows of the outbox tables, chosen by --since, --until, --aggregate-type, --aggregate-id and " +
	"--event-type, with their original message ids and properties, at most --rate a second, beside a running walbox run. " +
	"It never moves a slot. Its progress is kept in walbox_replays: killed, the same command resumes, sending again only " +
	"rows not yet confirmed. Only rows still in the tables can be sent: not rows deleted by producers or walbox prune, " +
	"nor messages of walbox_emit. Refused with --stream-url: the consumers of a stream seek back instead"

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon("replay")
	fs := newFlagSet("replay", replaySummary, stderr)
	if err := c.parse(fs, args); err != nil {
		return err
	}
	cfg, err := replayConfig(c, stderr)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		if errors.Is(err, replay.ErrNoColumn) || errors.Is(err, replay.ErrPositionIDs) {
			return c.fail(configError{err.Error()})
		}
		return c.fail(err)
	}
	cfg.OnParked = func(p *wire.Parked) {
		fmt.Fprintf(stdout, "parked %s from %s: %s\n", p.Message.AMQPMessageID(), p.Table, p.Reason)
	}

	ctx, stop := signalContext(ctx, func() {})
	defer stop()
	rp, err := replay.Open(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	defer rp.Close()
	plan := rp.Plan()
	showPlan(stdout, plan, relayedPrefix(c.v.relay.MessagePrefix), cfg.Table)
	bar := newProgressBar(stderr, plan)
	res, err := rp.Run(ctx, bar.show)
	bar.end()
	if err != nil {
		return fail(fmt.Errorf("%w (%d rows sent and confirmed in this run; run the same command again to resume)", err, res.Sent))
	}
	fmt.Fprintf(stdout, "replay %s finished: sent %d rows (%d parked) in %s, every one confirmed by the broker; "+
		"%d rows of %d matched were sent by this run and earlier ones\n",
		plan.ID, res.Sent, res.Parked, res.Duration.Round(time.Millisecond), plan.Sent+res.Sent, plan.Matched)
	return nil
}

// replayConfig is replay's configuration from its settings, with run's broker endpoints. It
// refuses the stream mode and an empty time range, as bad settings.
func replayConfig(c *common, stderr io.Writer) (replay.Config, error) {
	if len(c.v.stream.URIs) > 0 {
		return replay.Config{}, badSetting(c.s.get("stream-url"), "walbox replay does not publish into a stream: "+
			"a stream keeps its history, so its consumers seek back to replay (by offset or timestamp)")
	}
	// A filter given empty, as from an unset shell variable, would filter nothing: every row would go out.
	for _, name := range []string{"since", "until", "aggregate-type", "aggregate-id", "event-type"} {
		if st := c.s.get(name); st.set && st.value == "" {
			return replay.Config{}, badSetting(st, "empty: it would filter nothing, and every row would go out; leave the flag out to filter nothing")
		}
	}
	r, cfg := c.v.relay, c.v.replay
	if f := cfg.Filter; !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return cfg, badSetting(c.s.get("until"), "%s is not after --since %s: no row can match",
			f.Until.UTC().Format(time.RFC3339), f.Since.UTC().Format(time.RFC3339))
	}
	cfg.DatabaseURL, cfg.Publication, cfg.Table, cfg.Mappings = r.DatabaseURL, r.Publication, r.Table, c.mappings()
	eps, err := c.brokers("walbox")
	if err != nil {
		return cfg, err
	}
	// Every node of --amqp-url, in turn, as walbox run dials them, with run's message properties.
	cfg.Dial = func(ctx context.Context) (wire.Publisher, error) { return eps.Dial(ctx) }
	eps.WatchQueues(parkWaitNotice(stderr))
	return cfg, cfg.Validate()
}

// showPlan says which replay runs, from where, and what it cannot reach.
func showPlan(w io.Writer, p replay.Plan, prefix string, t wire.Table) {
	fmt.Fprintf(w, "replay %s: %s\n", p.ID, p.Filter)
	if p.TimeSource != "" {
		fmt.Fprintf(w, "  --since and --until compare  %s\n", p.TimeSource)
	}
	if p.Resumed {
		fmt.Fprintf(w, "  resumed: %d rows sent and confirmed before; %d of %d matched rows left\n", p.Sent, p.Left, p.Matched)
	} else {
		fmt.Fprintf(w, "  %d rows matched\n", p.Matched)
	}
	if prefix != "" {
		fmt.Fprintf(w, "  messages written with %s (prefix %q) are in no table: replay cannot send them\n", t.EmitFunction(), prefix)
	}
}

// progressBar shows a replay's progress. On a terminal it redraws a bar in place. Elsewhere it
// writes a line each report, about one a second.
type progressBar struct {
	w        io.Writer
	id       string
	terminal bool
	drawn    bool
	last     replay.Progress
	lastAt   time.Time
}

func newProgressBar(w io.Writer, p replay.Plan) *progressBar {
	f, ok := w.(*os.File)
	return &progressBar{w: w, id: p.ID, terminal: ok && isTerminal(f), lastAt: time.Now(),
		last: replay.Progress{Sent: p.Sent, Matched: p.Matched}}
}

func (b *progressBar) show(p replay.Progress) {
	now := time.Now()
	perSecond := float64(p.Sent-b.last.Sent) / now.Sub(b.lastAt).Seconds()
	b.last, b.lastAt = p, now
	pct := 100.0
	if p.Matched > 0 {
		pct = min(100, 100*float64(p.Sent)/float64(p.Matched))
	}
	if !b.terminal {
		fmt.Fprintf(b.w, "replay %s: %d of %d rows sent (%.0f%%), %.0f/s, table %s\n", b.id, p.Sent, p.Matched, pct, perSecond, p.Table)
		return
	}
	const width = 30
	full := int(pct / 100 * width)
	fmt.Fprintf(b.w, "\r[%s%s] %d/%d %3.0f%% %.0f/s ", strings.Repeat("#", full), strings.Repeat(".", width-full),
		p.Sent, p.Matched, pct, perSecond)
	b.drawn = true
}

// end ends the bar's line on a terminal.
func (b *progressBar) end() {
	if b.drawn {
		fmt.Fprintln(b.w)
	}
}
