package streampub

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/internal/streamconn"
	"github.com/walbox/walbox/wire"
)

// ErrNotStored means a row the relay would skip is not the stream's message at its position. The
// error that says so is also wire.ErrConflict: the relay stops on it.
var ErrNotStored = errors.New("a row the relay would skip is not the stream's message at its position")

// Check compares rows with the stream's messages as Publish does, without publishing. Doctor,
// status and recover --dry-run feed it the rows a slot would replay up to the stream's last row.
// So they name a restored server that wrote other rows there, as walbox run does when it stops.
// It only reads: it declares no stream and no producer.
type Check struct {
	s *Session
}

// OpenCheck finds the last row that walbox run's relay of cfg.Slot stored in cfg.Stream, as Bind
// does. The relay streams from database on the database system system. Last says whether there is
// one. The stream must exist. Close releases the connection.
func OpenCheck(cfg Config, system uint64, database string) (*Check, error) {
	cfg = cfg.WithDefaults()
	env, err := stream.NewEnvironment(streamconn.Options().SetUris(cfg.URIs))
	if err != nil {
		return nil, fmt.Errorf("connect: %w", wire.ErrSessionClosed) // its error may print the URI
	}
	sys := strconv.FormatUint(system, 10)
	name := ProducerName(system, database, cfg.Slot)
	a, err := lookupAnchor(env, &cfg, producerOf{name: name}, sys)
	if err != nil {
		_ = env.Close()
		return nil, err
	}
	cfg.Producer = name
	return &Check{s: &Session{cfg: cfg, env: env, anchor: a, system: sys}}, nil
}

// Last returns the position of the stream's last row of the relay; found is false for none.
func (c *Check) Last() (timeline int32, commitLSN uint64, found bool) { return c.s.Last() }

// Stored checks m, the row the slot sends at position (timeline, lsn, index). A row after the
// stream's last row is not checked: past is true, and so for every later row. A row at or before
// it must be the stream's message there, with its id and body. Else the error is ErrNotStored,
// with walbox run's words. Rows too large for a frame are parked, not stored, and pass.
func (c *Check) Stored(timeline int32, lsn uint64, index int, m *wire.Message) (past bool, err error) {
	s := c.s
	s.At(timeline, lsn, index)
	if !s.anchor.found || s.anchor.pos.less(s.pos) {
		return true, nil
	}
	if s.pos.LSN < s.cfg.SkipBefore {
		return false, nil // a reshard's cut: the old set's rows
	}
	msg, err := s.message(m)
	if err != nil {
		return false, err
	}
	msg.SetPublishingId(s.anchor.id)
	msg.ApplicationProperties[PropPublishingID] = s.anchor.id
	if _, err := encodeWithin(msg, maxFrame); err != nil {
		return false, nil // parked
	}
	return false, s.checkStored(msg)
}

// Close releases the connection.
func (c *Check) Close() error { return c.s.env.Close() }
