package checker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/wire"
)

// VerifierConfig configures a Verifier. The zero value of every field but URL and Queue selects
// its default.
type VerifierConfig struct {
	// URL is the broker's AMQP URL. Required.
	URL string
	// Queue is the queue to consume; it must exist. Required.
	Queue string
	// Prefetch is the consumer's prefetch count (default 500).
	Prefetch int
	// MaxDeliveries bounds the deliveries kept (default 5,000,000). Past it the Verifier stops
	// consuming, and Await reports the overflow.
	MaxDeliveries int
	// Quiet is how long Await keeps listening after the last missing row arrived, to catch late
	// duplicates and phantoms (default 500ms).
	Quiet time.Duration
	// Stall ends Await early when rows are missing and nothing arrived for this long (default:
	// only Await's timeout ends it).
	Stall time.Duration
	// Logf, if set, receives a line for each reconnect.
	Logf func(format string, args ...any)
}

func (c *VerifierConfig) defaults() error {
	if c.URL == "" || c.Queue == "" {
		return errors.New("checker: verifier: url and queue required")
	}
	if c.Prefetch <= 0 {
		c.Prefetch = 500
	}
	if c.MaxDeliveries <= 0 {
		c.MaxDeliveries = 5_000_000
	}
	if c.Quiet <= 0 {
		c.Quiet = 500 * time.Millisecond
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return nil
}

// Verifier consumes a queue, acknowledging messages after recording them, and reconnects
// whenever the connection fails (a message it received but could not acknowledge comes again,
// and counts as a duplicate).
type Verifier struct {
	cfg VerifierConfig

	mu         sync.Mutex
	deliveries []Delivery
	overflow   bool
	changed    chan struct{} // closed and replaced on every delivery
	reconnects int
	canaries   int // walbox's canaries, received and not kept

	cancel context.CancelFunc
	done   chan struct{}
}

// NewVerifier returns a Verifier; Start begins consuming.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Verifier{cfg: cfg, changed: make(chan struct{})}, nil
}

// Start consumes in a goroutine of its own until Stop.
func (v *Verifier) Start(ctx context.Context) {
	ctx, v.cancel = context.WithCancel(ctx)
	v.done = make(chan struct{})
	go func() {
		defer close(v.done)
		v.run(ctx)
	}()
}

// Stop ends consuming and waits for it.
func (v *Verifier) Stop() {
	if v.cancel != nil {
		v.cancel()
		<-v.done
	}
}

func (v *Verifier) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil && !v.overflowed() {
		err := v.session(ctx)
		if ctx.Err() != nil || v.overflowed() {
			return
		}
		v.mu.Lock()
		v.reconnects++
		v.mu.Unlock()
		v.cfg.Logf("checker: verifier: %v (reconnecting in %v)", err, backoff)
		sleep(ctx, backoff)
		backoff = min(2*backoff, 2*time.Second)
	}
}

// session consumes over one connection until it fails or ctx ends.
func (v *Verifier) session(ctx context.Context) error {
	conn, err := amqp.DialConfig(v.cfg.URL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("channel: %w", err)
	}
	if err := ch.Qos(v.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("qos: %w", err)
	}
	msgs, err := ch.Consume(v.cfg.Queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", v.cfg.Queue, err)
	}
	// Acks go in batches (multiple), after recording: a message received but not acknowledged
	// when the connection fails comes again, and counts as a duplicate.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last amqp.Delivery
	unacked := 0
	ack := func() {
		if unacked > 0 {
			_ = last.Ack(true)
			unacked = 0
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			ack()
		case d, ok := <-msgs:
			if !ok {
				return errors.New("consumer closed")
			}
			if !v.record(d) {
				return errors.New("too many deliveries")
			}
			last, unacked = d, unacked+1
			if unacked >= v.cfg.Prefetch/2 {
				ack()
			}
		}
	}
}

// record keeps one delivery and reports whether there is room for more.
func (v *Verifier) record(d amqp.Delivery) bool {
	if wire.IsCanary(d.Type, d.Headers) {
		v.mu.Lock()
		v.canaries++ // walbox's canary, not a row of the Writer's
		v.mu.Unlock()
		return true
	}
	rec := Parse(d.MessageId, d.Body)
	rec.Redelivered = d.Redelivered
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.deliveries) >= v.cfg.MaxDeliveries {
		v.overflow = true
		return false
	}
	v.deliveries = append(v.deliveries, rec)
	close(v.changed)
	v.changed = make(chan struct{})
	return true
}

// Parse turns a message id and a body into a Delivery, marking a body that is not the Writer's
// JSON as malformed.
func Parse(id string, body []byte) Delivery {
	var p payload
	d := Delivery{ID: id}
	if err := json.Unmarshal(body, &p); err != nil || p.Aggregate == "" || p.Seq <= 0 {
		d.Malformed = true
		return d
	}
	d.Aggregate, d.Seq = p.Aggregate, p.Seq
	return d
}

func (v *Verifier) overflowed() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.overflow
}

// Canaries returns the number of walbox's canaries received; they are not deliveries.
func (v *Verifier) Canaries() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.canaries
}

// Deliveries returns a copy of the deliveries so far, in the order received.
func (v *Verifier) Deliveries() []Delivery {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]Delivery(nil), v.deliveries...)
}

// Count returns the number of deliveries so far.
func (v *Verifier) Count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.deliveries)
}

// Reconnects returns how often the consumer had to reconnect.
func (v *Verifier) Reconnects() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reconnects
}

// Await waits until every committed row was delivered (then for the quiet period, to catch late
// duplicates and phantoms) or timeout passes or ctx ends, and returns the verdict.
func (v *Verifier) Await(ctx context.Context, committed []Row, timeout time.Duration) Report {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	missing := make(map[string]bool, len(committed))
	for _, r := range committed {
		missing[r.ID] = true
	}
	seen := 0
	timedOut, stalled := false, false
	for !timedOut && !stalled {
		v.mu.Lock()
		for _, d := range v.deliveries[seen:] {
			delete(missing, d.ID)
		}
		seen = len(v.deliveries)
		changed, overflow := v.changed, v.overflow
		v.mu.Unlock()
		if len(missing) == 0 || overflow {
			break
		}
		var stall <-chan time.Time
		var timer *time.Timer
		if v.cfg.Stall > 0 {
			timer = time.NewTimer(v.cfg.Stall)
			stall = timer.C
		}
		select {
		case <-changed:
		case <-stall:
			stalled = true
		case <-ctx.Done():
			timedOut = true
		}
		if timer != nil {
			timer.Stop()
		}
	}
	if !timedOut && !stalled {
		v.settle(ctx)
	}
	rep := Check(committed, v.Deliveries())
	rep.Elapsed = time.Since(start)
	rep.TimedOut = timedOut
	rep.Stalled = stalled
	rep.Overflow = v.overflowed()
	return rep
}

// settle waits until no delivery arrived for the quiet period, or ctx ends.
func (v *Verifier) settle(ctx context.Context) {
	for {
		v.mu.Lock()
		changed := v.changed
		v.mu.Unlock()
		t := time.NewTimer(v.cfg.Quiet)
		select {
		case <-changed:
			t.Stop()
		case <-t.C:
			return
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}
