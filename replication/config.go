package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/wire"
)

// Publisher is what the relay needs from the broker side: one session of publishing with confirms.
// The contract is wire.Publisher's.
// Its values live in package wire: wire.Confirm, wire.Parked, wire.ErrUnpublishable, wire.ErrSessionClosed.
// So package publisher implements it without importing this package, which links the PostgreSQL driver.
type Publisher = wire.Publisher

// Flusher is implemented by a Publisher that keeps back what it is handed (wire.Flusher).
type Flusher = wire.Flusher

// Scheduler is implemented by a Publisher that can hold a message until its DeliverAt (package
// schedule). Schedule numbers the message among the published ones. Its verdict says the message is
// recorded, and the slot may pass it. A Publisher that cannot (a stream's) gets such messages parked.
type Scheduler interface {
	Schedule(ctx context.Context, m *wire.Message) (uint64, error)
}

// blockable is implemented by a Publisher that knows whether the broker blocks it (a memory or disk alarm).
// The shutdown's log names the block.
// At the shutdown deadline the stream closes the publisher if a publish call is still in progress.
// A socket write ignores every context, so its Close must then cut the connection at once.
type blockable interface {
	Blocked() bool
}

// Positioner is implemented by a Publisher that needs to know where each message comes from.
// Package streampub numbers messages by it, for the broker's deduplication.
// Before each Publish the stream calls At with three values:
//   - the timeline of the transaction's commit record;
//   - its LSN (Begin's FinalLSN);
//   - the row's index, counted from 0.
//
// The index counts the transaction's rows and its transactional logical decoding messages of any prefix.
// It counts them whether or not this relay publishes them, so the message prefix does not change it.
// That is so on PostgreSQL 14+, where the relay asks for messages whatever the prefix.
// The server sends a transaction again exactly as before.
// So a row has the same position on every replay, and positions grow in commit order.
type Positioner interface {
	At(timeline int32, commitLSN uint64, index int)
}

// SystemBound is implemented by a Publisher whose positions are valid within one database system.
// Package streampub is one: positions of another system's timelines and LSNs do not compare.
// The relay calls Bind once per session, before it streams.
// It passes the server's system identifier and the database of the slot (IDENTIFY_SYSTEM's).
// An error ends the session.
type SystemBound interface {
	Bind(ctx context.Context, system uint64, database string) error
}

// Guarded is implemented by a Publisher that keeps messages back and writes them later.
// A Flusher does, as in package streampub.
// The relay gives it the session's check.
// It calls the check right before each write to the broker, from the goroutine that publishes.
// An error from the check means the session is over: the publisher writes nothing and fails the call.
type Guarded interface {
	Guard(check func() error)
}

// Dialer opens a new publishing session.
type Dialer func(ctx context.Context) (Publisher, error)

// Config configures a Relay.
type Config struct {
	// DatabaseURL is the libpq connection string or URL of the database with the outbox.
	// The role needs LOGIN REPLICATION. Required.
	DatabaseURL string
	// ReplicationURL, if set, is the server the relay streams from.
	// It is a hot standby of DatabaseURL's server (PostgreSQL 16+).
	// The relay decodes its slot there, to keep decoding off the primary.
	// DatabaseURL stays the primary: the record of the slot and the checks of the publication live there.
	// Empty: the relay streams from DatabaseURL, and refuses it if it is a standby.
	ReplicationURL string
	// Slot is the logical replication slot's name (default DefaultSlot).
	Slot string
	// Publication is the publication that contains the outbox table (default DefaultPublication).
	Publication string
	// Table is the outbox table (default public.outbox), when Mappings is empty.
	// Its schema has walbox's record of the slot, whatever Mappings says.
	// The command walbox migrate creates the record there.
	Table wire.Table
	// Mappings are the outbox tables of the publication with their column mappings; empty means
	// Table with the default contract. At the start of every session each is checked against the
	// table's actual columns.
	Mappings []wire.Mapping
	// MessagePrefix is the prefix of the logical decoding messages relayed as outbox messages.
	// Those are the messages the emit function (wire.EmitFunction) writes (default wire.DefaultMessagePrefix).
	// NoMessages relays none and does not ask the server for messages (which PostgreSQL before 14
	// cannot send). The server sends every slot every message, whatever the publication.
	MessagePrefix string
	// Canary, when set, is the slot whose canary messages the relay relays (decoder.WithCanary).
	// The daemon's canary writes them (package canary). Empty relays none.
	Canary string
	// Shard and Shards name the shard of the outbox table this relay streams (package shard).
	// Shards 0 is an unsharded relay.
	// Whenever it checks the publication, a sharded relay checks that the row filter selects exactly this shard.
	Shard, Shards int
	// Window bounds the messages published but not yet confirmed (default DefaultWindow).
	Window int
	// StatusInterval is how often the relay reports its position to the server (default DefaultStatusInterval).
	// Under a short wal_sender_timeout, reports come every quarter of it, if that is sooner.
	StatusInterval time.Duration
	// ServerTimeout is how long the relay waits to hear anything from the server, having asked it to reply.
	// Past it, the relay takes the replication connection for dead and starts a new session.
	// Zero (the default) means three quarters of the server's wal_sender_timeout.
	// On a silent partition the relay gives up before the server drops it and lets a standby take the slot.
	// The relay asks for a reply in every status update once it has heard nothing for half an interval.
	// A live server answers at once, except while it decodes a large transaction of other tables.
	// It then reads replies only every half wal_sender_timeout.
	// So a value below half of wal_sender_timeout plus a status interval is raised to that, with a warning.
	// Any byte counts, so one long message streaming in is not silence.
	// Session setup is bounded by the same time.
	// Without this, a silent network partition would keep the relay waiting until TCP gives up, minutes later.
	ServerTimeout time.Duration
	// ShutdownTimeout bounds the wait for outstanding confirms when Run's context ends (default
	// DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// CreateSlot lets Run create a missing slot (DefaultCreateSlot).
	// Run warns that rows committed before it are not covered; `walbox migrate` creates it ahead of time.
	CreateSlot *bool
	// FailoverSlot says whether the slot Run creates is a failover slot (DefaultFailoverSlot, PostgreSQL 17+).
	// Unless it is slots.FailoverOff, Run also turns an existing slot that is not one into one.
	// The value slots.FailoverOn on a server before 17 stops Run at its first session.
	FailoverSlot slots.FailoverSlot
	// MaxBackoff caps the wait between sessions after an error (default DefaultMaxBackoff).
	MaxBackoff time.Duration
	// StandbyRetry is how often a standby starts a session to take the slot (default DefaultStandbyRetry).
	// In between, it reads every 100 ms whether the slot was released.
	StandbyRetry time.Duration
	// WaitForServers makes Run retry when PostgreSQL or the broker cannot be reached at start.
	// By default such a failure ends Run, since it usually means a wrong URL.
	// Outages after the first contact are always waited out.
	WaitForServers bool
	// Dial opens publishing sessions. Required.
	Dial Dialer
	// Logger receives the relay's logs (default: discard).
	Logger *slog.Logger
	// Observer is told about every message and session, for metrics (default: nobody).
	Observer Observer
}

// replicationURL is the server the relay streams from.
func (c *Config) replicationURL() string {
	if c.ReplicationURL != "" {
		return c.ReplicationURL
	}
	return c.DatabaseURL
}

// NoMessages as Config.MessagePrefix relays no logical decoding messages.
const NoMessages = "none"

// messagePrefix returns the prefix of relayed messages, "" for none.
func (c *Config) messagePrefix() string {
	if c.MessagePrefix == NoMessages {
		return ""
	}
	return c.MessagePrefix
}

// Defaults for the zero values of Config. The slot, publication and window are the shared
// vocabulary's (package wire), which the commands and the other relays use too.
const (
	DefaultSlot            = wire.DefaultSlot
	DefaultPublication     = wire.DefaultPublication
	DefaultWindow          = wire.DefaultWindow
	DefaultStatusInterval  = time.Second
	DefaultShutdownTimeout = 10 * time.Second
	DefaultMaxBackoff      = 30 * time.Second
	DefaultStandbyRetry    = time.Second
	DefaultCreateSlot      = true
	DefaultFailoverSlot    = slots.FailoverAuto
)

// WithDefaults returns c with each zero value replaced by its default.
func (c Config) WithDefaults() Config {
	if c.Slot == "" {
		c.Slot = DefaultSlot
	}
	if c.Publication == "" {
		c.Publication = DefaultPublication
	}
	if c.Table == (wire.Table{}) {
		c.Table = wire.DefaultTable
	}
	if len(c.Mappings) == 0 {
		// Defaults left empty: the column check tells a default optional column from one the user named.
		// A table may lack a default optional column.
		c.Mappings = []wire.Mapping{{Table: c.Table}}
	}
	if c.MessagePrefix == "" {
		c.MessagePrefix = wire.DefaultMessagePrefix
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	orDefault(&c.StatusInterval, DefaultStatusInterval)
	orDefault(&c.ShutdownTimeout, DefaultShutdownTimeout)
	orDefault(&c.MaxBackoff, DefaultMaxBackoff)
	orDefault(&c.StandbyRetry, DefaultStandbyRetry)
	if c.FailoverSlot == "" {
		c.FailoverSlot = DefaultFailoverSlot
	}
	if c.CreateSlot == nil {
		create := DefaultCreateSlot
		c.CreateSlot = &create
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = noObserver{}
	}
	return c
}

// Validate reports the first bad setting. A zero value stands for its default (WithDefaults).
func (c Config) Validate() error {
	c = c.WithDefaults()
	if c.DatabaseURL == "" {
		return errors.New("database url: required")
	}
	if err := slots.CheckName(c.Slot); err != nil {
		return err
	}
	if c.MessagePrefix == wire.CanaryPrefix {
		return fmt.Errorf("message prefix %s: walbox's canary uses it", wire.CanaryPrefix)
	}
	for _, m := range c.Mappings {
		if err := m.Validate(); err != nil {
			return err
		}
	}
	if c.Shards < 0 || (c.Shards > 0 && (c.Shard < 0 || c.Shard >= c.Shards)) {
		return fmt.Errorf("shard %d of %d: out of range", c.Shard, c.Shards)
	}
	if c.Window < 1 {
		return fmt.Errorf("window %d: must be at least 1", c.Window)
	}
	if err := positive(c.StatusInterval, "status interval"); err != nil {
		return err
	}
	if c.ServerTimeout != 0 && c.ServerTimeout < 3*c.StatusInterval {
		return fmt.Errorf("server timeout %v: must be at least three status intervals (%v)", c.ServerTimeout, 3*c.StatusInterval)
	}
	for _, d := range []struct {
		d    time.Duration
		name string
	}{{c.ShutdownTimeout, "shutdown timeout"}, {c.MaxBackoff, "max backoff"}, {c.StandbyRetry, "standby retry"}} {
		if err := positive(d.d, d.name); err != nil {
			return err
		}
	}
	if _, err := slots.ParseFailoverSlot(string(c.FailoverSlot)); err != nil {
		return fmt.Errorf("failover slot %w", err)
	}
	if c.Dial == nil {
		return errors.New("dial: required")
	}
	return nil
}

func orDefault(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}

func positive(d time.Duration, name string) error {
	if d <= 0 {
		return fmt.Errorf("%s %v: must be positive", name, d)
	}
	return nil
}
