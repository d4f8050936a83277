package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// fakePositions is a registry and coverage check in memory that logs, with the status updates
// sent, what happened in which order.
type fakePositions struct {
	mu       sync.Mutex
	log      []string
	limit    pglogrepl.LSN
	recorded pglogrepl.LSN
	hold     chan struct{} // while non-nil, record waits for it to close
	fail     error         // record fails with it
}

func (f *fakePositions) capAt(_ context.Context, w pglogrepl.LSN) (pglogrepl.LSN, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return min(w, f.limit), nil
}

func (f *fakePositions) record(_ context.Context, lsn pglogrepl.LSN) error {
	f.mu.Lock()
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	if lsn > f.recorded {
		f.recorded = lsn
		f.log = append(f.log, fmt.Sprintf("record %d", lsn))
	}
	return nil
}

func (f *fakePositions) replayedCap(_ context.Context, lsn pglogrepl.LSN) (pglogrepl.LSN, error) {
	return lsn, nil
}

func (f *fakePositions) lastRecorded() pglogrepl.LSN {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.recorded
}

// sent logs a status update; it fails the test if the position is ahead of the record.
func (f *fakePositions) sent(t *testing.T, u pglogrepl.StandbyStatusUpdate) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u.WALFlushPosition > f.recorded {
		t.Errorf("sent %d with only %d recorded", u.WALFlushPosition, f.recorded)
	}
	if u.WALWritePosition != u.WALFlushPosition || u.WALApplyPosition != u.WALFlushPosition {
		t.Errorf("positions %+v not all set to the flush position", u)
	}
	f.log = append(f.log, fmt.Sprintf("send %d", u.WALFlushPosition))
	return nil
}

func (f *fakePositions) events() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.log...)
}

func testReporter(t *testing.T, pos *fakePositions, interval time.Duration) *reporter {
	t.Helper()
	r := newReporter(&Config{StatusInterval: interval, Slot: "s"}, pos, nil, mark{w: 100})
	r.send = func(u pglogrepl.StandbyStatusUpdate) error { return pos.sent(t, u) }
	r.silence = time.Hour
	return r
}

// Each position is recorded before it is sent, capped at the verified coverage position.
func TestReportRecordsBeforeItSends(t *testing.T) {
	pos := &fakePositions{limit: 300, recorded: 100}
	r := testReporter(t, pos, time.Hour)
	for _, w := range []pglogrepl.LSN{200, 250, 400} {
		r.offer(mark{w: w, moved: w})
		if err := r.report(); err != nil {
			t.Fatal(err)
		}
	}
	got := fmt.Sprint(pos.events())
	want := "[record 200 send 200 record 250 send 250 record 300 send 300]"
	if got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
}

// A position whose record fails is not sent, and the reporter's failure says why.
func TestPositionNotRecordedIsNotSent(t *testing.T) {
	boom := errors.New("registry down")
	pos := &fakePositions{limit: 1000, recorded: 100, fail: boom}
	r := testReporter(t, pos, time.Hour)
	r.offer(mark{w: 200, moved: 200})
	if err := r.report(); !errors.Is(err, boom) {
		t.Fatalf("report = %v, want %v", err, boom)
	}
	if ev := pos.events(); len(ev) != 0 {
		t.Fatalf("events %v, want none", ev)
	}
}

// While the record of a position waits on the database, the reporter sends nothing: not the
// position, and not an earlier one, whatever a keepalive asks.
func TestNothingIsSentWhileTheRecordWaits(t *testing.T) {
	hold := make(chan struct{})
	pos := &fakePositions{limit: 1000, recorded: 100, hold: hold}
	r := testReporter(t, pos, 10*time.Millisecond)
	var once sync.Once
	release := func() {
		once.Do(func() {
			pos.mu.Lock()
			pos.hold = nil
			pos.mu.Unlock()
			close(hold)
		})
	}
	r.offer(mark{w: 500, moved: 500})
	r.start()
	defer r.close()
	defer release() // before close, which waits for the record
	r.replyNow()
	time.Sleep(200 * time.Millisecond)
	if ev := pos.events(); len(ev) != 0 {
		t.Fatalf("events while the record waits: %v, want none", ev)
	}
	release()
	if err := r.final(); err != nil {
		t.Fatal(err)
	}
	if ev := pos.events(); len(ev) < 2 || ev[0] != "record 500" || ev[1] != "send 500" {
		t.Fatalf("events %v, want record 500, send 500 first", ev)
	}
}

// A keepalive that asks for a reply is answered at once, though the status interval is long.
func TestReplyIsSentAtOnce(t *testing.T) {
	pos := &fakePositions{limit: 1000, recorded: 100}
	r := testReporter(t, pos, time.Hour)
	r.start()
	defer r.close()
	waitFor(t, 5*time.Second, "the first status update", func() bool { return len(pos.events()) == 1 })
	start := time.Now()
	r.replyNow()
	waitFor(t, 5*time.Second, "the reply", func() bool { return len(pos.events()) == 2 })
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("replied after %v, with a status interval of an hour", d)
	}
}

// A watermark that moves is reported within reportDelay, not at the next status interval.
func TestMovedWatermarkIsReportedSoon(t *testing.T) {
	pos := &fakePositions{limit: 1000, recorded: 100}
	r := testReporter(t, pos, time.Hour)
	r.start()
	defer r.close()
	waitFor(t, 5*time.Second, "the first status update", func() bool { return len(pos.events()) == 1 })
	r.offer(mark{w: 700, moved: 700})
	waitFor(t, 5*time.Second, "the moved watermark", func() bool { return len(pos.events()) == 3 })
	if got := pos.events()[2]; got != "send 700" {
		t.Fatalf("last event %q, want send 700", got)
	}
}

// A server silent beyond the bound ends the reporter with errServerSilent, whatever the stream
// is doing, and the stream is told.
func TestSilentServerEndsTheReporter(t *testing.T) {
	pos := &fakePositions{limit: 1000, recorded: 100}
	r := testReporter(t, pos, 20*time.Millisecond)
	r.silence = 100 * time.Millisecond
	r.heard = newHeardClock()
	told := make(chan error, 1)
	r.onFail = func(err error) { told <- err }
	r.start()
	defer r.close()
	select {
	case err := <-told:
		if !errors.Is(err, errServerSilent) {
			t.Fatalf("reporter ended with %v, want errServerSilent", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a silent server went unnoticed")
	}
	if err := r.final(); !errors.Is(err, errServerSilent) {
		t.Fatalf("final after the failure = %v, want errServerSilent", err)
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
