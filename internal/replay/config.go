package replay

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/walbox/walbox/internal/republish"
	"github.com/walbox/walbox/wire"
)

// DefaultRate is the messages a second a replay publishes at most, unless told otherwise. A
// replay runs beside the relay, and its consumers take both: it leaves them room.
const DefaultRate = 1000

// Config configures a replay.
type Config struct {
	// DatabaseURL, Publication, Table and Mappings are as in replication.Config, with the same
	// defaults. walbox_replays is in Table's schema, beside walbox_slots.
	DatabaseURL string
	Publication string
	Table       wire.Table
	Mappings    []wire.Mapping

	// Filter chooses the rows. Its zero value chooses every row.
	Filter Filter

	// Rate is the most messages a second; 0 is no limit. Config{}.Rate is 0: callers that want
	// DefaultRate set it.
	Rate float64

	// Dial opens the publishing session; required.
	Dial republish.Dialer
	// OnParked, if set, is told about every row parked as one that can never be delivered.
	OnParked func(p *wire.Parked)
}

// Filter chooses the rows a replay sends. An empty field does not filter.
type Filter struct {
	// Since and Until bound the row's time: Since <= time < Until. The time is the commit time
	// where the server tracks it, else the mapped created_at column (see Plan.TimeSource).
	Since, Until time.Time
	// AggregateType, AggregateID and EventType must equal the mapped columns' text.
	AggregateType, AggregateID, EventType string
}

// timed reports whether the filter bounds the time.
func (f Filter) timed() bool { return !f.Since.IsZero() || !f.Until.IsZero() }

// String says the filter in words, as walbox_replays keeps it.
func (f Filter) String() string {
	var parts []string
	add := func(name, v string) {
		if v != "" {
			parts = append(parts, name+"="+v)
		}
	}
	at := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	add("since", at(f.Since))
	add("until", at(f.Until))
	add("aggregate-type", f.AggregateType)
	add("aggregate-id", f.AggregateID)
	add("event-type", f.EventType)
	if len(parts) == 0 {
		return "every row"
	}
	return strings.Join(parts, " ")
}

// ErrUntilBeforeSince is Validate's error for an empty time range.
var ErrUntilBeforeSince = errors.New("until is not after since: no row can match")

// Validate checks c, its defaults filled in or not. It only checks.
func (c Config) Validate() error {
	switch {
	case c.DatabaseURL == "":
		return errors.New("database url: required")
	case c.Dial == nil:
		return errors.New("dial: required")
	case c.Rate < 0:
		return fmt.Errorf("rate %v: want 0 (no limit) or more", c.Rate)
	case !c.Filter.Since.IsZero() && !c.Filter.Until.IsZero() && !c.Filter.Until.After(c.Filter.Since):
		return fmt.Errorf("%w (since %s, until %s)", ErrUntilBeforeSince,
			c.Filter.Since.UTC().Format(time.RFC3339), c.Filter.Until.UTC().Format(time.RFC3339))
	}
	for _, m := range c.Mappings {
		if err := m.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// withDefaults returns c with each zero value replaced by its default.
func (c Config) withDefaults() Config {
	if c.Publication == "" {
		c.Publication = wire.DefaultPublication
	}
	if c.Table == (wire.Table{}) {
		c.Table = wire.DefaultTable
	}
	if len(c.Mappings) == 0 {
		c.Mappings = []wire.Mapping{{Table: c.Table}}
	}
	c.Mappings = slices.Clone(c.Mappings)
	for i := range c.Mappings {
		c.Mappings[i] = c.Mappings[i].WithDefaults()
	}
	return c
}

// id names the replay: a hash of its tables and filter. The rate is not in it: a replay may be
// resumed at another rate.
func (c Config) id() string {
	var b strings.Builder
	for _, m := range c.Mappings {
		b.WriteString("table=" + m.Table.String() + "\n")
	}
	b.WriteString("filter=" + c.Filter.String() + "\n")
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:8])
}
