package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/logs"

	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/parked"
	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/streampub"
)

const parkedSummary = "List, show, replay or discard the messages walbox parked: rows that could never be delivered as written. " +
	"Usage: walbox parked list | show ID | replay ID... | replay --all | discard --yes ID... | discard --yes --all. " +
	"Replay publishes each to its own exchange and routing key with its original id and headers, " +
	"reading the row's current version from its outbox table where it is still there, " +
	"and removes the parked copy only once the broker confirmed it; one that still cannot be published is parked again. " +
	"Takes run's database, table and broker settings"

var parkedSubcommands = []string{"list", "show", "replay", "discard"}

func runParked(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommon("parked")
	fs := newFlagSet("parked", parkedSummary, stderr)
	args, err := c.parseWithArgs(fs, args)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		return configError{"a subcommand is required: list, show ID, replay ID... or discard ID..."}
	}
	sub, ids := args[0], args[1:]
	if !slices.Contains(parkedSubcommands, sub) {
		return configError{fmt.Sprintf("unknown subcommand %q%s (want list, show, replay or discard)", sub,
			didYouMean(sub, parkedSubcommands, "%q"))}
	}
	if err := checkParkedArgs(sub, ids, c.v.parkedAll, c.v.yes); err != nil {
		return err
	}
	var target *streampub.Config // the park stream's, with --stream-url
	if len(c.v.stream.URIs) > 0 {
		target = &c.v.stream
	}
	ctx, stop := signalContext(ctx, func() {})
	defer stop()
	if target != nil {
		err = runParkedStream(ctx, c, *target, sub, ids, stdout)
	} else {
		var cfg parked.Config
		if cfg, err = parkedConfig(c); err != nil {
			return err
		}
		err = runParkedSub(ctx, c, cfg, sub, ids, stdout)
	}
	if errors.Is(err, parked.ErrUnknownID) || errors.Is(err, parked.ErrOtherDatabase) {
		return configError{err.Error()}
	}
	if err != nil {
		return c.fail(err)
	}
	return nil
}

func runParkedSub(ctx context.Context, c *common, cfg parked.Config, sub string, ids []string, stdout io.Writer) error {
	db, database, err := parkedDatabase(ctx, c)
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	cfg.DB, cfg.Database = db, database
	switch sub {
	case "list", "show":
		l, err := parked.List(ctx, cfg)
		if err != nil {
			return err
		}
		views := make([]parkedView, len(l.Messages))
		for i, p := range l.Messages {
			views[i] = parkedView{ID: p.ID, Table: p.Table, LSN: p.LSN, Reason: p.Reason, Size: p.Size, ParkedAt: p.ParkedAt,
				CreatedAt: p.CreatedAt, Headers: p.Headers, Body: p.Body, Dropped: p.BodyDropped()}
		}
		return showParkedViews(stdout, sub, views, ids, parkedRest{l.Others, l.More}, database)
	case "discard":
		return parked.Discard(ctx, cfg, ids, c.v.parkedAll, parkedReport(stdout))
	}
	return parked.Replay(ctx, cfg, ids, c.v.parkedAll, parkedReport(stdout))
}

// parkedDatabase connects to run's database and names it as parked copies do (wire.ParkedBy).
func parkedDatabase(ctx context.Context, c *common) (*pgx.Conn, string, error) {
	db, err := pgconnect.Connect(ctx, c.v.relay.DatabaseURL)
	if err != nil {
		return nil, "", fmt.Errorf("connect to the database: %w", err)
	}
	database, err := inspect.Database(ctx, db)
	if err != nil {
		db.Close(context.Background())
		return nil, "", err
	}
	return db, database, nil
}

// runParkedStream runs a subcommand on the park stream of target; the database records what was
// replayed or discarded.
func runParkedStream(ctx context.Context, c *common, target streampub.Config, sub string, ids []string, stdout io.Writer) error {
	logs.SetLogger(quietStreamClient{})
	db, database, err := parkedDatabase(ctx, c)
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	cfg := parked.StreamConfig{Stream: target, DB: db, Schema: c.v.relay.Table.Schema, Mappings: parkedMappings(c), Database: database}
	switch sub {
	case "list", "show":
		l, err := parked.ListStream(ctx, cfg)
		if err != nil {
			return err
		}
		views := make([]parkedView, len(l.Entries))
		for i, e := range l.Entries {
			views[i] = parkedView{ID: e.ID, Table: e.Table, LSN: e.LSN, Reason: e.Reason, Size: e.Size, ParkedAt: e.ParkedAt,
				CreatedAt: e.CreatedAt, Headers: e.Props, Body: e.Body, Dropped: len(e.Body) == 0 && e.Size > 0}
		}
		return showParkedViews(stdout, sub, views, ids, parkedRest{l.Others, l.More}, database)
	case "discard":
		return parked.DiscardStream(ctx, cfg, ids, c.v.parkedAll, parkedReport(stdout))
	}
	return parked.ReplayStream(ctx, cfg, ids, c.v.parkedAll, parkedReport(stdout))
}

// parkedView is a parked message or park stream entry, as list and show print it.
type parkedView struct {
	ID, Table, LSN, Reason string
	Size                   int
	ParkedAt, CreatedAt    time.Time
	Headers                map[string]any
	Body                   []byte
	Dropped                bool
}

// parkedRest is what a list did not show. That is the ids other databases parked, by database,
// and how many past the limit were not read.
type parkedRest struct {
	others map[string]string
	more   int
}

// showParkedViews prints the list, or every copy of the one id of show. A list counts the rest.
// show refuses another database's id.
func showParkedViews(stdout io.Writer, sub string, views []parkedView, ids []string, rest parkedRest, database string) error {
	others := rest.others
	if sub == "list" {
		showParked(stdout, views)
		if len(others) > 0 {
			fmt.Fprintf(stdout, "%d more parked by other databases on this exchange or stream, not shown\n", len(others))
		}
		if rest.more > 0 {
			fmt.Fprintf(stdout, "%d more not read: a command reads the first %d; replay or discard these, then list again\n",
				rest.more, parked.DefaultLimit)
		}
		return nil
	}
	var copies []parkedView
	for _, v := range views {
		if v.ID == ids[0] {
			copies = append(copies, v)
		}
	}
	if db, ok := others[ids[0]]; ok && len(copies) == 0 {
		return parked.OtherDatabase(ids[0], db, database)
	}
	if len(copies) == 0 {
		return fmt.Errorf("%w: %s (walbox parked list shows the ids; another reader may hold it)", parked.ErrUnknownID, ids[0])
	}
	showParkedMessages(stdout, copies)
	return nil
}

// checkParkedArgs checks the ids and switches a subcommand takes.
func checkParkedArgs(sub string, ids []string, all, yes bool) error {
	switch {
	case sub == "list" && len(ids) > 0:
		return configError{fmt.Sprintf("list takes no ids (got %q); walbox parked show ID shows one", ids[0])}
	case sub == "show" && len(ids) != 1:
		return configError{fmt.Sprintf("show takes one id, got %d", len(ids))}
	case (sub == "list" || sub == "show") && (all || yes):
		return configError{fmt.Sprintf("%s takes neither --all nor --yes", sub)}
	case (sub == "replay" || sub == "discard") && len(ids) == 0 && !all:
		return configError{fmt.Sprintf("%s needs the ids to %s, or --all (walbox parked list shows the ids)", sub, sub)}
	case (sub == "replay" || sub == "discard") && len(ids) > 0 && all:
		return configError{fmt.Sprintf("%s takes ids or --all, not both", sub)}
	case sub == "discard" && !yes:
		return configError{"discard needs --yes: discarded messages are gone for good"}
	case sub == "replay" && yes:
		return configError{"replay takes no --yes"}
	}
	return nil
}

// parkedConfig dials the broker as walbox run does, with its tables.
func parkedConfig(c *common) (parked.Config, error) {
	eps, err := c.brokers("walbox")
	if err != nil {
		return parked.Config{}, err
	}
	return parked.Config{Dial: func(ctx context.Context) (*publisher.Session, error) { return eps.Dial(ctx) }, Mappings: parkedMappings(c)}, nil
}

// parkedMappings are the outbox tables: those of the config file, or --table.
func parkedMappings(c *common) []outbox.Mapping {
	if maps := c.mappings(); len(maps) > 0 {
		return maps
	}
	return []outbox.Mapping{{Table: c.v.relay.Table}}
}

// showParked prints one line per parked message, in queue order.
func showParked(stdout io.Writer, msgs []parkedView) {
	if len(msgs) == 0 {
		fmt.Fprintln(stdout, "no parked messages")
		return
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTABLE\tPOSITION\tREASON\tSIZE\tPARKED AT")
	for _, p := range msgs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", p.ID, dash(p.Table), dash(p.LSN), shortReason(p.Reason), p.Size, parkedAt(p.ParkedAt))
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d parked messages\n", len(msgs))
}

// showParkedMessages prints every parked copy of one id: properties, headers and payload.
func showParkedMessages(w io.Writer, g []parkedView) {
	for i, p := range g {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "id          %s\ntable       %s\nposition    %s\nreason      %s\nsize        %d bytes\nparked at   %s\ncreated at  %s\n",
			p.ID, dash(p.Table), dash(p.LSN), p.Reason, p.Size, parkedAt(p.ParkedAt), parkedAt(p.CreatedAt))
		fmt.Fprintln(w, "headers")
		keys := make([]string, 0, len(p.Headers))
		for k := range p.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s: %v\n", k, p.Headers[k])
		}
		if p.Dropped {
			fmt.Fprintf(w, "payload     not kept (%d bytes)\n", p.Size)
			continue
		}
		fmt.Fprintf(w, "payload\n%s\n", p.Body)
	}
}

func parkedReport(w io.Writer) func(parked.Outcome) {
	return func(o parked.Outcome) {
		switch o.Action {
		case "replayed":
			fmt.Fprintf(w, "replayed %s from the %s (%s)\n", o.ID, o.Source, copies(o.Copies))
		case "parked again":
			fmt.Fprintf(w, "parked %s again: %s\n", o.ID, o.Reason)
		case "left parked":
			fmt.Fprintf(w, "left %s parked: %s\n", o.ID, o.Reason)
		default:
			fmt.Fprintf(w, "discarded %s (%s)\n", o.ID, copies(o.Copies))
		}
	}
}

// copies says how many parked copies of an id were done with.
func copies(n int) string {
	if n == 1 {
		return "1 parked copy"
	}
	return fmt.Sprintf("%d parked copies", n)
}

// shortReason keeps the end of a reason: what is wrong, without where it was found.
func shortReason(s string) string {
	const max = 80
	s = strings.ReplaceAll(s, "\n", " ")
	for _, mark := range []string{"bad outbox row: ", "message can never be published: "} {
		if i := strings.LastIndex(s, mark); i >= 0 {
			s = s[i+len(mark):]
		}
	}
	if len(s) > max {
		return s[:max-3] + "..."
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func parkedAt(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
