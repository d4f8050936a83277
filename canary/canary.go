// Package canary proves that the whole path of walbox run is alive. Now and then it writes a
// logical decoding message through the database. The relay relays it like any other message, to
// the routing key wire.CanaryEventType. The canary reads it back from a queue of its own, or from
// the stream in stream mode. A break anywhere (database, decoding, publication, exchange, binding,
// broker) stops it coming back. Problem then says so within two intervals. See docs/operations.md and docs/architecture.md.
package canary

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/wire"
)

// DefaultInterval is how often walbox run writes a canary unless told otherwise.
const DefaultInterval = 30 * time.Second

// MinInterval is the shortest interval. A canary takes a few round trips to come back. Two
// shorter intervals pass before any can, and the path would never be proven alive.
const MinInterval = 100 * time.Millisecond

// queryTimeout bounds each statement of the canary.
const queryTimeout = 5 * time.Second

// Config configures a Canary.
type Config struct {
	// Interval is how often a canary is written. It must be MinInterval or more.
	Interval time.Duration
	// DatabaseURL is where the canary is written: the primary, also with --replication-url.
	DatabaseURL string
	// Slot is the relay's slot: its canaries carry it, and its decoder relays only those.
	Slot string
	// Publication and Tables are checked before each write. A logical decoding message is not
	// filtered by the publication: alone, the canary would miss a dropped outbox table.
	Publication string
	Tables      []wire.Table
	// Exchange is the exchange the relay publishes the canary to; it names the queue.
	Exchange string
	// Dial opens a reader of the canaries. publisher.Endpoints.DialCanary declares queue and reads it.
	// A stream's reader (streampub.DialCanary) reads the stream and ignores queue.
	Dial func(ctx context.Context, queue string) (Reader, error)
	// Active reports whether the relay streams from the slot. Only then does the canary write
	// and read; a standby sends none.
	Active func() bool
	// OnLatency, when set, is told each canary's time from commit to return.
	OnLatency func(time.Duration)
	Logger    *slog.Logger
}

// Reader reads canaries back; an error of Next means it is gone. *publisher.CanaryReader and
// *streampub.CanaryReader are ones.
type Reader interface {
	Next(ctx context.Context) (wire.Canary, error)
	Close() error
}

// Canary writes canaries and reads them back. Run it once; its other methods are safe meanwhile.
type Canary struct {
	cfg Config
	run string // this process's canaries carry it: another's, or an older run's, do not count

	mu      sync.Mutex
	active  bool      // the last tick found the relay active
	since   time.Time // the later of the start of the active period and the last canary back
	problem string    // the last failure of a write, a check or the reader; "" for none
	covered string    // why the publication does not cover the outbox; "" while it does
	off     bool      // the server cannot send the canary back (errNoMessages)
}

// errNoMessages is why the canary turns itself off on PostgreSQL 13. A relay can be given logical
// decoding messages from PostgreSQL 14 on (pgoutput's messages option).
var errNoMessages = errors.New("PostgreSQL before 14 sends no logical decoding messages: the canary is off")

// New returns a Canary of cfg.
func New(cfg Config) (*Canary, error) {
	if cfg.Interval < MinInterval {
		return nil, fmt.Errorf("canary: interval %s: below %s", cfg.Interval, MinInterval)
	}
	if cfg.DatabaseURL == "" || cfg.Slot == "" || cfg.Exchange == "" || cfg.Dial == nil || cfg.Active == nil {
		return nil, fmt.Errorf("canary: database url, slot, exchange, dial and active are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Canary{cfg: cfg, run: uuid.NewString()}, nil
}

// content is the payload of a canary.
type content struct {
	System   string `json:"system"`
	Database string `json:"database"`
	Slot     string `json:"slot"`
	Run      string `json:"run"`
}

// Queue names the canary queue of one reader of slot in database of the server system, relayed to
// exchange. Each reader declares its own: no other process, nor an older reader, takes its
// canaries. Clones of one server share system, database and slot; reader tells their queues apart.
// The name starts with the exchange's, like the park queue's. So a broker user's rights on
// "^exchange\." cover it. A name past AMQP's 255 bytes is cut, and ends with a hash of the whole
// instead.
func Queue(exchange, system, database, slot, reader string) string {
	name := exchange + "." + wire.CanaryPrefix + "." + slot + "." + database + "." + system + "." + reader
	if len(name) <= maxQueueName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	tail := "." + hex.EncodeToString(sum[:8])
	return name[:maxQueueName-len(tail)] + tail
}

// maxQueueName is AMQP's bound on a queue's name, in bytes.
const maxQueueName = 255

// Run writes a canary every interval while the relay is active, and reads them back, until ctx
// ends. It returns nil then; failures are kept for Problem, and logged once each.
func (c *Canary) Run(ctx context.Context) error {
	s := &session{c: c}
	defer s.close()
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		c.tick(ctx, s)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// tick writes one canary if the relay is active, opening what it needs first.
func (c *Canary) tick(ctx context.Context, s *session) {
	active := c.cfg.Active()
	c.mu.Lock()
	if active && !c.active {
		c.since = time.Now()
	}
	c.active = active
	off := c.off
	c.mu.Unlock()
	if !active || off {
		s.close() // a standby neither writes nor reads
		return
	}
	err := s.write(ctx)
	if errors.Is(err, errNoMessages) {
		c.turnOff()
		return
	}
	c.fail(err)
}

// turnOff stops the canary for good, and says so once.
func (c *Canary) turnOff() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = true
	c.cfg.Logger.Warn("canary", "slot", c.cfg.Slot, "error", errNoMessages.Error())
}

// fail records err as the problem, or clears it; a new problem is logged.
func (c *Canary) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	text := ""
	if err != nil {
		text = err.Error()
	}
	if text != "" && text != c.problem {
		c.cfg.Logger.Warn("canary", "slot", c.cfg.Slot, "error", text)
	}
	c.problem = text
}

// came records a canary back, committed at commit.
func (c *Canary) came(commit time.Time) {
	now := time.Now()
	c.mu.Lock()
	c.since = now
	c.mu.Unlock()
	if c.cfg.OnLatency != nil && !commit.IsZero() {
		c.cfg.OnLatency(max(now.Sub(commit), 0))
	}
}

// Age is the time since the last canary came back. If none came back since the relay became active,
// it is the time since then. It is 0 while the relay is not active, and on PostgreSQL 13.
func (c *Canary) Age() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.active || c.off {
		return 0
	}
	return time.Since(c.since)
}

// Problem says why the path is not proven alive; "" while it is. No canary may have come back for
// two intervals. Or the publication may no longer cover an outbox table.
func (c *Canary) Problem() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.active || c.off:
		return ""
	case c.covered != "":
		return "canary: " + c.covered
	}
	age := time.Since(c.since)
	if age <= 2*c.cfg.Interval {
		return ""
	}
	why := fmt.Sprintf("canary: none came back for %s (interval %s)", age.Round(time.Second), c.cfg.Interval)
	if c.problem != "" {
		why += ": " + c.problem
	}
	return why
}

// session is the canary's database connection and queue reader, opened while the relay is active.
type session struct {
	c      *Canary
	conn   *pgx.Conn
	id     content // the canary's identity, read from the database
	reader Reader
	stop   context.CancelFunc // ends the reader's goroutine quietly
	done   chan struct{}      // closed when the reader's goroutine ends
}

// write checks the publication and writes one canary, opening the connection and the reader first.
func (s *session) write(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	if err := s.openDB(ctx); err != nil {
		return err
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := s.openReader(ctx); err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{"v": 1, "id": uuid.NewString(), "aggregate_type": wire.CanaryEventType,
		"aggregate_id": s.c.cfg.Slot, "event_type": wire.CanaryEventType, "payload": s.id})
	if err != nil {
		return err
	}
	if _, err := s.conn.Exec(ctx, "SELECT pg_catalog.pg_logical_emit_message(true, $1::pg_catalog.text, $2::pg_catalog.text)",
		wire.CanaryPrefix, string(body)); err != nil {
		s.closeConn()
		return fmt.Errorf("database: write the canary: %w", err)
	}
	return nil
}

// check records whether the publication covers the outbox tables.
func (s *session) check(ctx context.Context) error {
	cov, err := inspect.ReadCoverage(ctx, s.conn, s.c.cfg.Publication, s.c.cfg.Tables)
	if err != nil {
		s.closeConn()
		return fmt.Errorf("database: check publication %s: %w", s.c.cfg.Publication, err)
	}
	why := ""
	if err := cov.Err(); err != nil {
		why = err.Error()
	}
	s.c.mu.Lock()
	s.c.covered = why
	s.c.mu.Unlock()
	return nil
}

// openDB connects to the database and reads the canary's identity, unless connected.
func (s *session) openDB(ctx context.Context) error {
	if s.conn != nil {
		return nil
	}
	conn, err := pgconnect.Connect(ctx, s.c.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database: connect: %w", err)
	}
	s.conn = conn
	if slots.ServerMajor(conn.PgConn()) < 14 {
		s.closeConn()
		return errNoMessages
	}
	system, err := inspect.SystemID(ctx, conn)
	if err == nil {
		s.id.System = system
		err = conn.QueryRow(ctx, "SELECT pg_catalog.current_database()::pg_catalog.text").Scan(&s.id.Database)
	}
	if err != nil {
		s.closeConn()
		return fmt.Errorf("database: %w", err)
	}
	s.id.Slot, s.id.Run = s.c.cfg.Slot, s.c.run
	return nil
}

// openReader opens the reader of the canary queue, unless it is open and reading.
func (s *session) openReader(ctx context.Context) error {
	if s.done != nil {
		select {
		case <-s.done:
			s.closeReader()
		default:
			return nil
		}
	}
	// A new name for each reader: none meets a queue left from before, on a lost node say.
	r, err := s.c.cfg.Dial(ctx, Queue(s.c.cfg.Exchange, s.id.System, s.id.Database, s.id.Slot, uuid.NewString()))
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	rctx, stop := context.WithCancel(context.Background())
	s.reader, s.stop, s.done = r, stop, make(chan struct{})
	go s.read(rctx, r, s.id, s.done)
	return nil
}

// read takes the canaries from r until it fails or ctx ends. Only this run's canaries of this slot
// count.
func (s *session) read(ctx context.Context, r Reader, id content, done chan struct{}) {
	defer close(done)
	for {
		m, err := r.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.c.fail(fmt.Errorf("broker: %w", err))
			}
			return
		}
		var got content
		if json.Unmarshal(m.Body, &got) == nil && got == id {
			s.c.came(m.CommitTime)
		}
	}
}

func (s *session) closeConn() {
	if s.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.conn.Close(ctx)
		s.conn = nil
	}
}

// closeReader stops the reader and waits for its goroutine.
func (s *session) closeReader() {
	if s.reader == nil {
		return
	}
	s.stop()
	s.reader.Close()
	<-s.done
	s.reader, s.stop, s.done = nil, nil, nil
}

// close closes the connection and the reader.
func (s *session) close() {
	s.closeConn()
	s.closeReader()
}
