package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/checkpoint"
)

// fakePositions is a registry and coverage check in memory.
// With the status updates sent, it logs what happened in which order.
type fakePositions struct {
	mu       sync.Mutex
	log      []string
	limit    pglogrepl.LSN
	recorded pglogrepl.LSN
	gate     chan struct{} // while non-nil, record waits for it to close
	fail     error         // record fails with it
}

func (f *fakePositions) capAt(_ context.Context, w pglogrepl.LSN) (pglogrepl.LSN, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return min(w, f.limit), nil
}

func (f *fakePositions) record(_ context.Context, lsn pglogrepl.LSN) error {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		<-gate
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

func (f *fakePositions) owes(_, _ pglogrepl.LSN, _ checkpoint.Mark) bool { return false }

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
	return newReporter(testParts(t, pos, &Config{StatusInterval: interval, Slot: "s"}))
}

// testParts returns what a reporter of cfg needs, with pos as its registry and connection.
func testParts(t *testing.T, pos *fakePositions, cfg *Config) reporterParts {
	return reporterParts{cfg: cfg, pos: pos, send: func(u pglogrepl.StandbyStatusUpdate) error { return pos.sent(t, u) },
		start: checkpoint.Mark{Watermark: 100}, silence: time.Hour}
}

// Each position is recorded before it is sent, capped at the verified coverage position.
func TestReportRecordsBeforeItSends(t *testing.T) {
	pos := &fakePositions{limit: 300, recorded: 100}
	r := testReporter(t, pos, time.Hour)
	for _, w := range []pglogrepl.LSN{200, 250, 400} {
		r.offer(checkpoint.Mark{Watermark: w, Moved: w})
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
	r.offer(checkpoint.Mark{Watermark: 200, Moved: 200})
	if err := r.report(); !errors.Is(err, boom) {
		t.Fatalf("report = %v, want %v", err, boom)
	}
	if ev := pos.events(); len(ev) != 0 {
		t.Fatalf("events %v, want none", ev)
	}
}

// While the record of a position waits on the database, the reporter sends nothing.
// It sends neither the position nor an earlier one, whatever a keepalive asks.
func TestNothingIsSentWhileTheRecordWaits(t *testing.T) {
	gate := make(chan struct{})
	pos := &fakePositions{limit: 1000, recorded: 100, gate: gate}
	r := testReporter(t, pos, 10*time.Millisecond)
	var once sync.Once
	release := func() {
		once.Do(func() {
			pos.mu.Lock()
			pos.gate = nil
			pos.mu.Unlock()
			close(gate)
		})
	}
	r.offer(checkpoint.Mark{Watermark: 500, Moved: 500})
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

// Under a short wal_sender_timeout, the reporter does not wait for the server's request at half of
// it. Its next status update is due within a third of the lapse bound, whatever the status interval.
func TestShortSenderTimeoutBringsTheNextReportForward(t *testing.T) {
	pos := &fakePositions{limit: 1000, recorded: 100}
	parts := testParts(t, pos, &Config{StatusInterval: time.Hour, Slot: "s"})
	parts.lapse = newLapse(time.Second)
	r := newReporter(parts)
	if err := r.report(); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	next := time.Until(r.sched.Next())
	r.mu.Unlock()
	if bound := parts.lapse.bound; next > bound/3 {
		t.Errorf("the next status update is due in %v, over a third of the lapse bound %v", next.Round(time.Millisecond), bound)
	}
	if got := reportEvery(time.Second, newLapse(time.Minute)); got != time.Second {
		t.Errorf("with wal_sender_timeout at a minute, status updates %v apart, want the status interval", got)
	}
}

// windowReporter returns a reporter with a window of eight (a backlog of four), not started.
// Its status interval is an hour, and it has sent the session's first report (send 100).
func windowReporter(t *testing.T, pos *fakePositions) *reporter {
	t.Helper()
	r := newReporter(testParts(t, pos, &Config{StatusInterval: time.Hour, Slot: "s", Window: 8}))
	if err := r.report(); err != nil {
		t.Fatal(err)
	}
	return r
}

// look runs the reporter's next look at the messages passed, at once: it reports if due.
func look(t *testing.T, r *reporter) {
	t.Helper()
	r.mu.Lock()
	at := r.sched.Next()
	due := r.sched.Due(at)
	r.mu.Unlock()
	if time.Until(at) > time.Minute {
		t.Fatal("the reporter looks at no messages")
	}
	if due {
		if err := r.report(); err != nil {
			t.Fatal(err)
		}
	}
}

// offerAndWatch offers m and runs what the wake-up it must cause runs.
func offerAndWatch(t *testing.T, r *reporter, m checkpoint.Mark) {
	t.Helper()
	r.offer(m)
	select {
	case <-r.wake:
		r.awake()
	default:
		t.Fatalf("offer of %+v woke nothing", m)
	}
}

// Messages below the watermark are reported at the status interval while the stream keeps passing more.
// Once it passed half a window since the last report, they are reported at the next look.
// They are also reported at a look once it passed no message since the look before.
// Keepalives that moved it meanwhile do not count.
func TestBacklogOrQuietBringsTheReportForward(t *testing.T) {
	pos := &fakePositions{limit: 1 << 20, recorded: 100}
	r := windowReporter(t, pos)
	events := func(want ...string) {
		t.Helper()
		if got := fmt.Sprint(pos.events()); got != fmt.Sprint(want) {
			t.Fatalf("events %s, want %s", got, fmt.Sprint(want))
		}
	}
	offerAndWatch(t, r, checkpoint.Mark{Watermark: 200, Moved: 200, Passed: 1})
	r.offer(checkpoint.Mark{Watermark: 300, Moved: 300, Passed: 3})
	look(t, r) // two more messages, three in all: under half the window of eight
	events("send 100")
	r.offer(checkpoint.Mark{Watermark: 350, Moved: 300, Passed: 3}) // a keepalive
	r.offer(checkpoint.Mark{Watermark: 360, Moved: 300, Passed: 3}) // another
	look(t, r)                                                      // no message since the last look: quiet
	events("send 100", "record 360", "send 360")

	offerAndWatch(t, r, checkpoint.Mark{Watermark: 400, Moved: 400, Passed: 4})
	r.offer(checkpoint.Mark{Watermark: 500, Moved: 500, Passed: 6})
	look(t, r) // three since the report: under half the window
	r.offer(checkpoint.Mark{Watermark: 600, Moved: 600, Passed: 7})
	look(t, r) // four since the report: half the window
	events("send 100", "record 360", "send 360", "record 600", "send 600")

	r.offer(checkpoint.Mark{Watermark: 700, Moved: 600, Passed: 7}) // a keepalive after the report
	select {
	case <-r.wake:
		t.Fatal("a mark without messages woke the reporter")
	default:
	}
}

// Messages whose position a cap kept back still count as not reported.
// Once the cap lifts, the next quiet look reports them.
// But the capped report restarts the backlog: reporting sooner cannot pass the cap.
// On a standby, each report sends what the one before recorded.
// So more messages do not bring the next report forward at every look.
func TestMessagesACapKeptBackAreReportedOnceItLifts(t *testing.T) {
	pos := &fakePositions{limit: 150, recorded: 100}
	r := windowReporter(t, pos)
	offerAndWatch(t, r, checkpoint.Mark{Watermark: 200, Moved: 200, Passed: 4})
	look(t, r) // half the window: reported, but capped at 150
	r.offer(checkpoint.Mark{Watermark: 300, Moved: 300, Passed: 5})
	look(t, r) // one more message since the report took four: not quiet, under the backlog
	if got, want := fmt.Sprint(pos.events()), "[send 100 record 150 send 150]"; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	pos.mu.Lock()
	pos.limit = 1 << 20
	pos.mu.Unlock()
	look(t, r) // quiet since: the messages past 150 are reported
	if got, want := fmt.Sprint(pos.events()), "[send 100 record 150 send 150 record 300 send 300]"; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
}

// Confirms do not wake the reporter one by one.
// The first offer after a report, or while no report is brought forward, wakes it.
// Later ones wait for the report it brought forward, and a report listens again. Watermarks offered meanwhile are reported all the same, each report
// taking the latest.
func TestOffersWakeTheReporterOncePerReport(t *testing.T) {
	pos := &fakePositions{limit: 10000, recorded: 100}
	r := testReporter(t, pos, time.Hour)
	woken := func() bool {
		select {
		case <-r.wake:
			return true
		default:
			return false
		}
	}
	r.offer(checkpoint.Mark{Watermark: 200, Moved: 200, Passed: 1})
	if !woken() {
		t.Fatal("the first offer past the reported position did not wake the reporter")
	}
	r.awake()
	for w := pglogrepl.LSN(300); w <= 900; w += 100 {
		r.offer(checkpoint.Mark{Watermark: w, Moved: w, Passed: uint64(w)})
		if woken() {
			t.Fatalf("offer of %d woke the reporter, though a report is already due for the one before", w)
		}
	}
	if err := r.report(); err != nil {
		t.Fatal(err)
	}
	r.offer(checkpoint.Mark{Watermark: 1000, Moved: 1000, Passed: 1000})
	if !woken() {
		t.Fatal("an offer after the report did not wake the reporter")
	}

	// Running, it reports each burst of offers once, the latest of them.
	pos = &fakePositions{limit: 10000, recorded: 100}
	r = testReporter(t, pos, time.Hour)
	r.start()
	defer r.close()
	waitFor(t, 5*time.Second, "the first status update", func() bool { return len(pos.events()) == 1 })
	for round := range 3 {
		for w := range 50 {
			lsn := pglogrepl.LSN(1000*(round+1) + w)
			r.offer(checkpoint.Mark{Watermark: lsn, Moved: lsn, Passed: uint64(lsn)})
		}
		want := fmt.Sprintf("send %d", 1000*(round+1)+49)
		waitFor(t, 5*time.Second, want, func() bool { ev := pos.events(); return ev[len(ev)-1] == want })
	}
}

// A server silent beyond the bound ends the reporter with errServerSilent, whatever the stream is doing.
// The stream is told.
func TestSilentServerEndsTheReporter(t *testing.T) {
	pos := &fakePositions{limit: 1000, recorded: 100}
	told := make(chan error, 1)
	parts := testParts(t, pos, &Config{StatusInterval: 20 * time.Millisecond, Slot: "s"})
	parts.silence, parts.heard = 100*time.Millisecond, newHeardClock()
	parts.onFail = func(err error) { told <- err }
	r := newReporter(parts)
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
