package bench

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"
)

// Contender is one of the relays compared.
type Contender string

// The contenders, in the order they run within a scenario.
const (
	Ceiling Contender = "ceiling"
	// NoConfirms is the ceiling without durability, as relays that do not wait for the broker
	// publish: transient messages, not mandatory, on a channel without confirms.
	NoConfirms Contender = "no confirms"
	Walbox     Contender = "walbox"
	Poll100ms  Contender = "polling 100ms"
	Poll1s     Contender = "polling 1s"
	// WalboxBaseline is `walbox run` of another build (Config.BaselineBin), for a build against
	// build comparison in one run; WithBaseline adds it.
	WalboxBaseline Contender = "walbox baseline"
)

// The contenders that publish on several connections, for a cluster (see ClusterScenarios).
const (
	// Ceiling3 is the ceiling with three publishers, each a connection of its own with its own
	// window, spread over the broker's nodes in turn.
	Ceiling3 Contender = "ceiling 3 publishers"
	// WalboxStream is `walbox run --stream-url`: into a RabbitMQ stream, exactly once (drain only).
	WalboxStream Contender = "walbox stream"
	// Walbox3 is `walbox run --lanes 3`: three channels, each on a connection of its own.
	Walbox3 Contender = "walbox 3 lanes"
)

// withStream adds the stream contender to a drain's contenders.
func withStream(cs []Contender) []Contender { return append(cs[:len(cs):len(cs)], WalboxStream) }

// AllContenders lists every contender of the standard scenarios.
var AllContenders = []Contender{Ceiling, NoConfirms, Walbox, Poll100ms, Poll1s}

// WithBaseline returns the scenarios with the baseline build run before walbox wherever walbox
// runs (AlternateBaseline then sets the order).
func WithBaseline(ss []Scenario) []Scenario {
	out := make([]Scenario, 0, len(ss))
	for _, sc := range ss {
		var cs []Contender
		for _, c := range sc.Contenders {
			if c == Walbox {
				cs = append(cs, WalboxBaseline)
			}
			cs = append(cs, c)
		}
		sc.Contenders = cs
		out = append(out, sc)
	}
	return out
}

// AlternateBaseline swaps walbox and walbox baseline in every other scenario that runs both,
// counting from the first: baselineFirst says which of them runs first there. A trial's broker CPU
// depends on its place in the run: two builds run one after the other, in both orders, had the
// second cost the broker 13% more per message either way. One run with each setting puts each
// build in each place.
func AlternateBaseline(ss []Scenario, baselineFirst bool) []Scenario {
	out := make([]Scenario, 0, len(ss))
	first := baselineFirst
	for _, sc := range ss {
		b, w := slices.Index(sc.Contenders, WalboxBaseline), slices.Index(sc.Contenders, Walbox)
		if b >= 0 && w >= 0 {
			cs := slices.Clone(sc.Contenders)
			lo, hi := min(b, w), max(b, w)
			if first {
				cs[lo], cs[hi] = WalboxBaseline, Walbox
			} else {
				cs[lo], cs[hi] = Walbox, WalboxBaseline
			}
			sc.Contenders = cs
			first = !first
		}
		out = append(out, sc)
	}
	return out
}

// dbContenders are the contenders that relay from PostgreSQL: the only ones a load outside the
// benchmark, pgbench, can feed.
var dbContenders = []Contender{Walbox, Poll100ms, Poll1s}

// ClusterContenders lists the contenders of the cluster scenarios.
var ClusterContenders = []Contender{Ceiling, Ceiling3, Walbox, Walbox3}

// pollInterval is the polling relay's interval, zero for the other contenders.
func (c Contender) pollInterval() time.Duration {
	switch c {
	case Poll100ms:
		return 100 * time.Millisecond
	case Poll1s:
		return time.Second
	}
	return 0
}

func (c Contender) polls() bool { return c.pollInterval() > 0 }

// isCeiling reports whether the contender is the raw publisher, with one publisher or several,
// with confirms or without.
func (c Contender) isCeiling() bool { return c == Ceiling || c == Ceiling3 || c == NoConfirms }

// usesDB reports whether the contender reads its messages from PostgreSQL.
func (c Contender) usesDB() bool { return !c.isCeiling() }

// connections is how many connections the contender publishes on: the ceiling's publishers,
// walbox's lanes.
func (c Contender) connections() int {
	if c == Ceiling3 || c == Walbox3 {
		return 3
	}
	return 1
}

// Kind is a scenario's shape.
type Kind int

const (
	// Drain commits a backlog, then relays it as fast as possible.
	Drain Kind = iota
	// Steady commits rows at a fixed rate while the relay runs, and measures latency.
	Steady
)

func (k Kind) String() string {
	if k == Steady {
		return "steady"
	}
	return "drain"
}

// Load is what commits a steady scenario's rows.
type Load string

const (
	// InProcess, the zero Load, commits them from goroutines of the benchmark itself, on a fixed
	// schedule.
	InProcess Load = ""
	// Pgbench commits them from PostgreSQL's pgbench, a process of its own, rate-limited on its
	// schedule (random gaps of the same mean); latency then runs from each row's insert.
	Pgbench Load = "pgbench"
)

// Queue types of the bound queue.
const (
	Classic = "classic"
	Quorum  = "quorum"
)

// Scenario is one workload, run for each of its contenders in turn on the same data.
type Scenario struct {
	Name       string
	Kind       Kind
	Rows       int           // Drain: backlog rows
	TxSize     int           // Drain: rows per transaction (1: single-row transactions)
	Rate       int           // Steady: rows per second
	Duration   time.Duration // Steady: how long the producer runs
	Payload    int           // approximate JSON payload size in bytes
	Queue      string        // Classic or Quorum
	Contenders []Contender
	// Load commits a steady scenario's rows: in this process, or through pgbench.
	Load Load
	// Memory marks the scenarios the peak RSS target is about.
	Memory bool
}

// messages returns how many measured messages the scenario relays.
func (s Scenario) messages() int {
	if s.Kind == Steady {
		return int(float64(s.Rate) * s.Duration.Seconds())
	}
	return s.Rows
}

func (s Scenario) validate() error {
	switch {
	case s.Name == "":
		return errors.New("scenario: name required")
	case s.Kind == Drain && (s.Rows < 1 || s.TxSize < 1):
		return fmt.Errorf("scenario %s: rows and tx size must be positive", s.Name)
	case s.Kind == Steady && (s.Rate < 1 || s.Duration <= 0):
		return fmt.Errorf("scenario %s: rate and duration must be positive", s.Name)
	case s.Payload < 64:
		return fmt.Errorf("scenario %s: payload of %d bytes, want at least 64", s.Name, s.Payload)
	case s.Queue != Classic && s.Queue != Quorum:
		return fmt.Errorf("scenario %s: queue type %q, want classic or quorum", s.Name, s.Queue)
	case len(s.Contenders) == 0:
		return fmt.Errorf("scenario %s: no contenders", s.Name)
	case s.Load == Pgbench && s.Kind != Steady:
		return fmt.Errorf("scenario %s: the pgbench load is for steady scenarios only", s.Name)
	}
	for _, c := range s.Contenders {
		if s.Load == Pgbench && !c.usesDB() {
			return fmt.Errorf("scenario %s: contender %s has no database for pgbench to load", s.Name, c)
		}
	}
	return nil
}

// latencyFrom names where a steady scenario's end-to-end latency starts.
func (s Scenario) latencyFrom() string {
	if s.Load == Pgbench {
		return "insert"
	}
	return "commit"
}

// Sizes scales the standard scenarios.
type Sizes struct {
	Rows      int           // drain backlog (issue: 200,000)
	LargeRows int           // drain backlog of 10 KB messages
	RSSRows   int           // the large backlog that peak RSS is measured on (issue: 1,000,000)
	BigTx     int           // rows of the single large transaction (issue: 100,000)
	Steady    time.Duration // steady producer run (issue: 60 s)
	Rates     []int         // steady rates (issue: 500 and 2,000 rows/s)
}

// FullSizes are the sizes of issue 5.
var FullSizes = Sizes{Rows: 200_000, LargeRows: 40_000, RSSRows: 1_000_000, BigTx: 100_000,
	Steady: 60 * time.Second, Rates: []int{500, 2000}}

// QuickSizes run every scenario in a few minutes, for trying the tool out.
var QuickSizes = Sizes{Rows: 2000, LargeRows: 500, RSSRows: 10_000, BigTx: 5000,
	Steady: 3 * time.Second, Rates: []int{500, 2000}}

// Scenarios returns the standard scenarios at the given sizes.
func Scenarios(z Sizes) []Scenario {
	const small, large = 300, 10 << 10
	all := AllContenders
	var ss []Scenario
	ss = append(ss,
		Scenario{Name: "drain, 1-row tx", Kind: Drain, Rows: z.Rows, TxSize: 1, Payload: small, Queue: Classic, Contenders: withStream(all)},
		Scenario{Name: "drain, 100-row tx", Kind: Drain, Rows: z.Rows, TxSize: 100, Payload: small, Queue: Classic, Contenders: withStream(all)},
	)
	for _, r := range z.Rates {
		ss = append(ss, Scenario{Name: fmt.Sprintf("steady %d/s", r), Kind: Steady, Rate: r, Duration: z.Steady,
			Payload: small, Queue: Classic, Contenders: all})
	}
	for _, r := range z.Rates {
		ss = append(ss, Scenario{Name: fmt.Sprintf("steady %d/s, pgbench", r), Kind: Steady, Rate: r, Duration: z.Steady,
			Payload: small, Queue: Classic, Contenders: dbContenders, Load: Pgbench})
	}
	ss = append(ss,
		Scenario{Name: "drain, 1-row tx, 10 KB", Kind: Drain, Rows: z.LargeRows, TxSize: 1, Payload: large, Queue: Classic, Contenders: all},
		Scenario{Name: "steady 500/s, 10 KB", Kind: Steady, Rate: 500, Duration: z.Steady, Payload: large, Queue: Classic, Contenders: all},
		Scenario{Name: "drain, 1-row tx, quorum", Kind: Drain, Rows: z.Rows, TxSize: 1, Payload: small, Queue: Quorum, Contenders: all},
		Scenario{Name: "steady 500/s, quorum", Kind: Steady, Rate: 500, Duration: z.Steady, Payload: small, Queue: Quorum, Contenders: all},
		Scenario{Name: fmt.Sprintf("drain %s rows, 100-row tx", count(z.RSSRows)), Kind: Drain, Rows: z.RSSRows, TxSize: 100,
			Payload: small, Queue: Classic, Contenders: []Contender{Walbox}, Memory: true},
		Scenario{Name: fmt.Sprintf("one %s-row tx", count(z.BigTx)), Kind: Drain, Rows: z.BigTx, TxSize: z.BigTx,
			Payload: small, Queue: Classic, Contenders: []Contender{Walbox}, Memory: true},
	)
	return ss
}

// count writes n with thousands separators.
func count(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Config configures a benchmark run.
type Config struct {
	Scenarios []Scenario
	// WalboxBin is the walbox binary to run (see BuildWalbox). Required.
	WalboxBin string
	// BaselineBin is the walbox binary the WalboxBaseline contender runs; required for it.
	BaselineBin string
	// WorkDir receives the relays' logs and profiles. Required.
	WorkDir string
	// PollBatch is the polling relay's batch size (default 100).
	PollBatch int
	// Window is the most messages in flight for walbox and the ceiling (default 1024, walbox's).
	Window int
	// Producers is how many connections commit the rows (default 4).
	Producers int
	// Profile runs walbox in-process in a child with runtime/pprof, writing CPU and heap profiles
	// to WorkDir, instead of the real binary. Only for finding where time goes: the figures of a
	// profiled run are not walbox's.
	Profile bool
	// HotPath adds in-process measurements of the per-message work (see HotPath).
	HotPath bool
	// Log receives progress lines (default: discard).
	Log io.Writer
	// Command is the command line recorded in the report.
	Command string
}

func (c *Config) validate() error {
	if c.WalboxBin == "" {
		return errors.New("walbox binary: required")
	}
	if c.WorkDir == "" {
		return errors.New("work dir: required")
	}
	if c.PollBatch == 0 {
		c.PollBatch = 100
	}
	if c.Window == 0 {
		c.Window = 1024
	}
	if c.Producers == 0 {
		c.Producers = 4
	}
	if c.PollBatch < 1 || c.Window < 1 || c.Producers < 1 {
		return errors.New("poll batch, window and producers must be positive")
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	for _, s := range c.Scenarios {
		if err := s.validate(); err != nil {
			return err
		}
		if slices.Contains(s.Contenders, WalboxBaseline) && c.BaselineBin == "" {
			return fmt.Errorf("scenario %s: the walbox baseline contender needs a baseline binary", s.Name)
		}
		if s.Load == Pgbench && s.messages()%c.Producers != 0 {
			return fmt.Errorf("scenario %s: %d rows do not split evenly over %d producers (pgbench counts transactions per client)",
				s.Name, s.messages(), c.Producers)
		}
	}
	return nil
}
