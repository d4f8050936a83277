package streampub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/walbox/walbox/internal/streamconn"
	"github.com/walbox/walbox/wire"
)

// ParkEntry is one message of the park stream, as walbox parked it.
type ParkEntry struct {
	// Offset is its offset in the park stream.
	Offset int64
	// ID is the row's message id.
	ID string
	// Table and LSN say where the row came from; Reason why it was parked.
	Table, LSN, Reason string
	// ParkedAt is when it was parked; zero for an entry parked before walbox recorded it.
	ParkedAt time.Time
	// Size is the payload's size in bytes.
	Size int
	// Body is the payload.
	Body []byte
	// Props are the entry's application properties.
	Props map[string]any
	// CreatedAt is the row's creation time.
	CreatedAt time.Time
	// Database names the row's database (wire.ParkedBy); "" for an entry that does not say.
	Database string
}

func parkEntryOf(offset int64, m *amqp.Message) ParkEntry {
	str := func(k string) string { s, _ := m.ApplicationProperties[k].(string); return s }
	e := ParkEntry{Offset: offset, Table: str(PropParkTable), LSN: str(PropParkLSN), Reason: str(PropParkReason),
		Props: m.ApplicationProperties, Database: str(PropParkDatabase)}
	for _, d := range m.Data {
		e.Body = append(e.Body, d...)
	}
	e.Size = len(e.Body)
	if n, ok := m.ApplicationProperties[PropParkSize].(int64); ok {
		e.Size = int(n)
	}
	e.ParkedAt, _ = time.Parse(time.RFC3339Nano, str(PropParkParkedAt))
	if p := m.Properties; p != nil {
		if p.MessageID != nil {
			e.ID = fmt.Sprint(p.MessageID)
		}
		e.CreatedAt = p.CreationTime
	}
	return e
}

// Message returns the row as the entry holds it: its id, aggregate, event type, headers and
// payload.
func (e *ParkEntry) Message() wire.Message {
	str := func(k string) string { s, _ := e.Props[k].(string); return s }
	m := wire.Message{MessageID: e.ID, AggregateType: str(PropAggregateType), AggregateID: str(PropAggregateID),
		EventType: str(PropEventType), Payload: e.Body, CreatedAt: e.CreatedAt}
	if id, err := uuid.Parse(e.ID); err == nil && id.String() == e.ID {
		m.ID = id
	}
	m.CommitTime, _ = wire.ParseCommitTime(e.Props[wire.HeaderCommitTime])
	if raw := str(PropParkHeaders); raw != "" {
		d := json.NewDecoder(bytes.NewReader([]byte(raw)))
		d.UseNumber()
		_ = d.Decode(&m.Headers) // walbox wrote it from a map
	}
	return m
}

// parkEmptyWait is how long ReadPark waits for the park stream's last chunk. A stream that sends
// none meanwhile is empty. Brokers before 3.11 have no stream statistics to say so at once.
const parkEmptyWait = 2 * time.Second

// ReadPark reads every entry of the park stream of cfg.Stream, in offset order. It returns those
// keep keeps, so that only they are held in memory. keep is called in offset order.
func ReadPark(ctx context.Context, cfg Config, keep func(*ParkEntry) bool) ([]ParkEntry, error) {
	cfg = cfg.WithDefaults()
	env, err := stream.NewEnvironment(streamconn.Options().SetUris(cfg.URIs))
	if err != nil {
		return nil, fmt.Errorf("connect: %w", wire.ErrSessionClosed) // its error may print the URI
	}
	defer env.Close()
	name := ParkStream(cfg.Stream)
	if ok, err := env.StreamExists(name); err != nil || !ok {
		return nil, err
	}
	last, err := parkEnd(ctx, env, name)
	if err != nil || last < 0 {
		return nil, err
	}
	var (
		mu      sync.Mutex
		entries []ParkEntry
		read    = int64(-1) // the offset of the last entry read
		heard   = time.Now()
		done    = make(chan struct{})
	)
	c, err := env.NewConsumer(name, func(cc stream.ConsumerContext, m *amqp.Message) {
		mu.Lock()
		defer mu.Unlock()
		off := cc.Consumer.GetOffset()
		if off > last || off <= read {
			return
		}
		heard, read = time.Now(), off
		if e := parkEntryOf(off, m); keep(&e) {
			entries = append(entries, e)
		}
		if off == last {
			close(done)
		}
	}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()).SetClientProvidedName("walbox-parked"))
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", name, err)
	}
	defer c.Close()
	tick := time.NewTicker(cfg.ScanTimeout / 10)
	defer tick.Stop()
	for {
		select {
		case <-done:
			mu.Lock()
			defer mu.Unlock()
			return entries, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		mu.Lock()
		idle := time.Since(heard)
		mu.Unlock()
		if idle > cfg.ScanTimeout {
			return nil, fmt.Errorf("read stream %s: nothing for %v before offset %d", name, cfg.ScanTimeout, last)
		}
	}
}

// parkEnd returns the offset of the park stream's last message: -1 for an empty stream. The park
// lane writes one message an entry. So the last chunk ends that many entries after its first.
func parkEnd(ctx context.Context, env *stream.Environment, name string) (int64, error) {
	found := make(chan int64, 1)
	seen := 0 // only the client's dispatch goroutine touches it
	c, err := env.NewConsumer(name, func(cc stream.ConsumerContext, _ *amqp.Message) {
		seen++
		if seen == int(cc.GetEntriesCount()) {
			select {
			case found <- cc.Consumer.GetOffset():
			default:
			}
		}
	}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.Last()).SetClientProvidedName("walbox-parked"))
	if err != nil {
		return 0, fmt.Errorf("read stream %s: %w", name, err)
	}
	defer c.Close()
	select {
	case last := <-found:
		return last, nil
	case <-time.After(parkEmptyWait):
		return -1, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// ReplayProducer is the name of the producer walbox parked of database (wire.ParkedBy) replays
// into stream with. It differs from the relay's, so the relay's reading of its own messages passes
// over the replays. Each database numbers its replays on its own, so each has its own name. Under
// a shared one, the broker would drop one database's replay as a duplicate of another's.
func ReplayProducer(stream, database string) string {
	return "walbox-parked-" + strings.Replace(database, "/", "-", 1) + "-" + stream
}

// Replayer publishes parked rows into the stream again, each with a publishing id the caller
// gives. The broker stores a message only if its id is above the last it stored for the name. So
// a replay sent again with its id is stored once. It parks a row again into the park stream, at
// least once.
type Replayer struct {
	s        *Session
	producer string
}

// DialReplayer connects to cfg.URIs and declares the replay producer of database on cfg.Stream.
func DialReplayer(cfg Config, database string) (*Replayer, error) {
	cfg = cfg.WithDefaults()
	env, err := stream.NewEnvironment(streamconn.Options().SetUris(cfg.URIs).SetMaxProducersPerClient(2))
	if err != nil {
		return nil, fmt.Errorf("connect: %w", wire.ErrSessionClosed)
	}
	s := &Session{cfg: cfg, env: env, confirms: make(chan wire.Confirm, 16)}
	r := &Replayer{s: s, producer: ReplayProducer(cfg.Stream, database)}
	if s.main, err = s.newLane(cfg.Stream, r.producer); err == nil {
		s.park, err = s.newLane(ParkStream(cfg.Stream), "")
	}
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	return r, nil
}

// Last returns the last publishing id the broker stored for the replay producer; 0 for none.
func (r *Replayer) Last() (int64, error) {
	id, err := r.s.env.QuerySequence(r.producer, r.s.cfg.Stream)
	if err != nil {
		return 0, fmt.Errorf("stream %s: the replays' last id: %w", r.s.cfg.Stream, err)
	}
	return id, nil
}

// Send publishes m with publishing id and waits for the broker's confirm. A message too large for
// a frame wraps wire.ErrUnpublishable.
func (r *Replayer) Send(ctx context.Context, m *wire.Message, id int64) error {
	msg := baseMessage(m)
	msg.ApplicationProperties[PropProducer] = r.producer
	msg.ApplicationProperties[PropPublishingID] = id
	msg.SetPublishingId(id)
	if err := r.s.main.send(msg, id, r.s.nextSeq()); err != nil {
		return err
	}
	if err := r.s.main.flush(); err != nil {
		return err
	}
	return r.confirm(ctx)
}

// Park parks p into the park stream and waits for the broker's confirm.
func (r *Replayer) Park(ctx context.Context, p *wire.Parked) error {
	if _, err := r.s.Park(ctx, p); err != nil {
		return err
	}
	return r.confirm(ctx)
}

func (r *Replayer) confirm(ctx context.Context) error {
	select {
	case c, ok := <-r.s.confirms:
		if !ok {
			return fmt.Errorf("not confirmed: %w", wire.ErrSessionClosed)
		}
		return c.Err
	case <-ctx.Done():
		return fmt.Errorf("not confirmed: %w", ctx.Err())
	}
}

// Close closes the producers and the connection.
func (r *Replayer) Close() error { return r.s.Close() }
