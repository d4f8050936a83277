package replication

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walbox/walbox/checkpoint"
	"github.com/walbox/walbox/wire"
)

// burstPublisher is a Publisher whose confirms a test queues by hand.
type burstPublisher struct{ confirms chan wire.Confirm }

func (p *burstPublisher) Publish(context.Context, *wire.Message) (uint64, error) { return 0, nil }
func (p *burstPublisher) Park(context.Context, *wire.Parked) (uint64, error)     { return 0, nil }
func (p *burstPublisher) Confirms() <-chan wire.Confirm                          { return p.confirms }
func (p *burstPublisher) Close() error                                           { return nil }

// countingObserver counts the confirm events it sees.
type countingObserver struct{ confirmed, failed int }

func (o *countingObserver) Observe(e Event) {
	switch e.Kind {
	case Confirmed:
		o.confirmed++
	case ConfirmFailed:
		o.failed++
	}
}

// burstStream is a stream with n messages in flight, in one transaction that committed at end.
func burstStream(t *testing.T, n int, end pglogrepl.LSN) (*stream, *burstPublisher, *countingObserver) {
	t.Helper()
	pub := &burstPublisher{confirms: make(chan wire.Confirm, n+1)}
	obs := &countingObserver{}
	s := &stream{
		cfg:   &Config{StatusInterval: time.Second},
		log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		pub:   pub,
		led:   checkpoint.NewLedger[flight](1, n),
		stall: &stall{},
		stats: &Stats{},
		obs:   obs,
	}
	// Not started: the test reads what it was offered.
	s.rep = newReporter(reporterParts{cfg: s.cfg, start: checkpoint.Mark{Watermark: 1}})
	s.led.Begin()
	for seq := uint64(1); seq <= uint64(n); seq++ {
		if err := s.led.Dispatch(seq, flight{at: time.Now(), eventType: "e"}); err != nil {
			t.Fatal(err)
		}
	}
	s.led.Commit(end)
	return s, pub, obs
}

// A burst of confirms, as a multiple ack gives, is applied in one step.
// The first confirm's turn of the loop applies every confirm already waiting.
// It settles the watermark, the in-flight gauge and the next status update once.
func TestConfirmBurstIsAppliedInOneStep(t *testing.T) {
	const n, end = 64, pglogrepl.LSN(5000)
	s, pub, obs := burstStream(t, n, end)
	for seq := uint64(1); seq <= n; seq++ {
		pub.confirms <- wire.Confirm{Seq: seq, At: time.Now()}
	}
	first := <-pub.confirms
	if err := s.applyConfirms(first, true); err != nil {
		t.Fatal(err)
	}
	if got := s.led.InFlight(); got != 0 {
		t.Fatalf("in flight after one step: %d, want 0", got)
	}
	if obs.confirmed != n {
		t.Fatalf("observed %d confirms, want %d", obs.confirmed, n)
	}
	if s.led.Watermark() != end || s.moved != end {
		t.Fatalf("watermark %s, moved %s; want both %s", s.led.Watermark(), s.moved, end)
	}
	if got := s.stats.InFlight.Load(); got != 0 {
		t.Fatalf("in-flight gauge %d, want 0", got)
	}
	if got, want := s.rep.latest(), (checkpoint.Mark{Watermark: end, Moved: end, Passed: n}); got != want || len(s.rep.wake) != 1 {
		t.Fatalf("offered the reporter %+v (woken: %v), want %+v", got, len(s.rep.wake) == 1, want)
	}
}

// A failed verdict inside a burst stops the step there.
// The confirms before it count, the ones after it stay unread.
// The watermark does not pass the transaction.
func TestConfirmBurstStopsAtAFailure(t *testing.T) {
	const n, end = 10, pglogrepl.LSN(5000)
	s, pub, obs := burstStream(t, n, end)
	for seq := uint64(1); seq <= n; seq++ {
		c := wire.Confirm{Seq: seq, At: time.Now()}
		if seq == 4 {
			c.Err = errors.New("nacked")
		}
		pub.confirms <- c
	}
	first := <-pub.confirms
	err := s.applyConfirms(first, true)
	var be brokerError
	if !errors.As(err, &be) {
		t.Fatalf("error %v, want a broker error", err)
	}
	if obs.confirmed != 3 || obs.failed != 1 {
		t.Fatalf("observed %d confirmed and %d failed, want 3 and 1", obs.confirmed, obs.failed)
	}
	if got := len(pub.confirms); got != n-4 {
		t.Fatalf("%d confirms left unread, want %d", got, n-4)
	}
	if w := s.led.Watermark(); w >= end {
		t.Fatalf("watermark %s passed the transaction with a nacked message (end %s)", w, end)
	}
	if got := s.stats.InFlight.Load(); got != n-3 {
		t.Fatalf("in-flight gauge %d, want %d", got, n-3)
	}
}

// A session that closes behind a burst ends the step there.
// The confirms before the close count, and the watermark moves over them alone.
func TestConfirmBurstEndsAtAClosedSession(t *testing.T) {
	const n, end = 6, pglogrepl.LSN(5000)
	s, pub, obs := burstStream(t, n, end)
	for seq := uint64(1); seq <= 3; seq++ {
		pub.confirms <- wire.Confirm{Seq: seq, At: time.Now()}
	}
	close(pub.confirms)
	first := <-pub.confirms
	err := s.applyConfirms(first, true)
	var be brokerError
	if !errors.As(err, &be) {
		t.Fatalf("error %v, want a broker error", err)
	}
	if obs.confirmed != 3 || s.led.InFlight() != n-3 || s.stats.InFlight.Load() != n-3 {
		t.Fatalf("observed %d confirmed, %d in flight (gauge %d); want 3 and %d", obs.confirmed,
			s.led.InFlight(), s.stats.InFlight.Load(), n-3)
	}
	if w := s.led.Watermark(); w >= end {
		t.Fatalf("watermark %s passed the transaction with unconfirmed messages (end %s)", w, end)
	}
}

// The mark offered counts the messages below the watermark, not the confirms.
// A message may be confirmed in a transaction whose commit is not yet read.
// It is counted once the commit moves the watermark past it, so that the reporter looks at it then.
func TestMarkCountsMessagesBelowTheWatermark(t *testing.T) {
	const end = pglogrepl.LSN(5000)
	s, pub, _ := burstStream(t, 2, end)
	s.led = checkpoint.NewLedger[flight](1, 4) // room for a third message
	s.rep = newReporter(reporterParts{cfg: s.cfg, pos: &fakePositions{limit: 1 << 30},
		send: func(pglogrepl.StandbyStatusUpdate) error { return nil }, start: checkpoint.Mark{Watermark: 1}})
	for seq := uint64(1); seq <= 3; seq++ {
		if seq == 3 {
			s.led.Commit(end)
			s.led.Begin() // a transaction whose commit is not read yet
		}
		if err := s.led.Dispatch(seq, flight{at: time.Now(), eventType: "e"}); err != nil {
			t.Fatal(err)
		}
	}
	for seq := uint64(1); seq <= 3; seq++ {
		pub.confirms <- wire.Confirm{Seq: seq, At: time.Now()}
	}
	if err := s.applyConfirms(<-pub.confirms, true); err != nil {
		t.Fatal(err)
	}
	if got, want := s.rep.latest(), (checkpoint.Mark{Watermark: end, Moved: end, Passed: 2}); got != want {
		t.Fatalf("offered %+v after the confirms, want %+v", got, want)
	}
	if err := s.rep.report(); err != nil { // a report takes the mark; the reporter listens again
		t.Fatal(err)
	}
	<-s.rep.wake // the confirms' wake-up
	s.led.Commit(end + 100)
	s.moved = s.led.Watermark()
	s.offer()
	if got, want := s.rep.latest(), (checkpoint.Mark{Watermark: end + 100, Moved: end + 100, Passed: 3}); got != want {
		t.Fatalf("offered %+v after the commit, want %+v", got, want)
	}
	if len(s.rep.wake) != 1 {
		t.Fatal("the commit of a message confirmed before it was read did not wake the reporter")
	}
}
