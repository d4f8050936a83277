package checkpoint

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// op is what a step of a schedule test does.
type op int

const (
	offer   op = iota // Offer(mark); want: it wakes the reporter
	watch             // Watch(at)
	due               // Due(at); want: a report is due
	sent              // Sent(mark, lsn, at)
	request           // Request()
	next              // want Next() at the step's at
)

func (o op) String() string {
	return [...]string{"offer", "watch", "due", "sent", "request", "next"}[o]
}

// step is one event fed to a schedule, or one question asked, at a time after the start.
type step struct {
	op   op
	at   time.Duration
	mark Mark
	lsn  pglogrepl.LSN
	want bool
}

func mk(w, moved pglogrepl.LSN, passed uint64) Mark {
	return Mark{Watermark: w, Moved: moved, Passed: passed}
}

const ms = time.Millisecond

// start is the slot's position in every case; each case reports it first, at zero.
var start = mk(100, 100, 0)

// Every rule of the schedule, each fed events in order and asked what it answers.
// Cases use a status interval of a second and a window of eight: a backlog of four.
func TestSchedule(t *testing.T) {
	first := []step{{op: due, want: true}, {op: sent, mark: start, lsn: 100}}
	cases := []struct {
		name     string
		interval time.Duration
		steps    []step
	}{
		{name: "the first report is due at once", steps: []step{
			{op: due, at: 0, want: true},
		}},
		{name: "a report is due a status interval after the last", steps: []step{
			{op: due, at: 999 * ms},
			{op: next, at: time.Second},
			{op: due, at: time.Second, want: true},
			{op: sent, at: 1200 * ms, mark: start, lsn: 100},
			{op: due, at: 2199 * ms},
			{op: due, at: 2200 * ms, want: true},
		}},
		{name: "a request is due at once, until a report is sent", steps: []step{
			{op: request},
			{op: due, at: 1 * ms, want: true},
			{op: due, at: 2 * ms, want: true},
			{op: sent, at: 2 * ms, mark: start, lsn: 100},
			{op: due, at: 3 * ms},
		}},
		{name: "the first offer with messages wakes the reporter, later ones wait", steps: []step{
			{op: offer, mark: mk(200, 200, 1), want: true},
			{op: offer, mark: mk(300, 300, 2)},
			{op: watch},
			{op: offer, mark: mk(400, 400, 3)},
		}},
		{name: "a keepalive's mark does not wake the reporter", steps: []step{
			{op: offer, mark: mk(150, 100, 0)},
			{op: due, at: 999 * ms},
		}},
		{name: "a transaction without messages does not wake the reporter", steps: []step{
			{op: offer, mark: mk(200, 200, 0)},
		}},
		{name: "a quiet stream is reported at the next look", steps: []step{
			{op: offer, mark: mk(200, 200, 1), want: true},
			{op: watch},
			{op: next, at: 100 * ms},
			{op: due, at: 99 * ms},
			{op: due, at: 100 * ms, want: true},
		}},
		{name: "a steady stream under the backlog waits for the status interval", steps: []step{
			{op: offer, mark: mk(200, 200, 1), want: true},
			{op: watch},
			{op: offer, mark: mk(300, 300, 2)},
			{op: due, at: 100 * ms},
			{op: next, at: 200 * ms},
			{op: offer, mark: mk(400, 400, 3)},
			{op: due, at: 200 * ms},
			{op: next, at: 300 * ms},
			{op: offer, mark: mk(450, 450, 4)}, // four since the start, but the look saw three
			{op: offer, mark: mk(460, 460, 5)},
			{op: due, at: 300 * ms, want: true}, // five since the report: the backlog
		}},
		{name: "the backlog counts from the mark the last report took", steps: []step{
			{op: offer, mark: mk(200, 200, 1), want: true},
			{op: watch},
			{op: offer, mark: mk(300, 300, 3)},
			{op: due, at: 100 * ms},
			{op: offer, mark: mk(400, 400, 4)},
			{op: due, at: 200 * ms, want: true},
		}},
		{name: "keepalives do not hide a quiet stream", steps: []step{
			{op: offer, mark: mk(200, 200, 1), want: true},
			{op: watch},
			{op: offer, mark: mk(300, 300, 3)},
			{op: due, at: 100 * ms},
			{op: offer, mark: mk(350, 300, 3)},
			{op: offer, mark: mk(360, 300, 3)},
			{op: due, at: 200 * ms, want: true},
		}},
		{name: "a look that does not report looks again a delay later", interval: 150 * ms, steps: []step{
			{op: offer, mark: mk(200, 200, 1), want: true},
			{op: watch},
			{op: offer, mark: mk(300, 300, 2)},
			{op: next, at: 100 * ms},
			{op: due, at: 100 * ms},
			{op: next, at: 150 * ms}, // the report due comes before the look at 200 ms
			{op: due, at: 150 * ms, want: true},
		}},
		{name: "no look is set past the report due", steps: []step{
			{op: offer, mark: mk(200, 200, 1), want: true},
			{op: watch, at: 950 * ms},
			{op: next, at: time.Second},
		}},
		{name: "a short status interval is the look's delay", interval: 50 * ms, steps: []step{
			{op: offer, mark: mk(200, 200, 1), want: true},
			{op: watch},
			{op: next, at: 50 * ms},
		}},
		{name: "a watch while watching keeps the look", steps: []step{
			{op: offer, mark: mk(200, 200, 1), want: true},
			{op: watch},
			{op: watch, at: 50 * ms},
			{op: next, at: 100 * ms},
		}},
		{name: "a watermark not past the position sent is not watched", steps: []step{
			{op: offer, mark: mk(100, 100, 1), want: true},
			{op: watch},
			{op: next, at: time.Second},
			{op: offer, mark: mk(100, 100, 2), want: true},
		}},
		{name: "an idle step is not watched", steps: []step{
			{op: offer, mark: mk(100+IdleRecordStep-1, 100, 1), want: true},
			{op: watch},
			{op: next, at: time.Second},
			{op: offer, mark: mk(100+IdleRecordStep-1, 100, 2), want: true},
		}},
		{name: "a step of IdleRecordStep is watched", steps: []step{
			{op: offer, mark: mk(100+IdleRecordStep, 100, 1), want: true},
			{op: watch},
			{op: next, at: 100 * ms},
		}},
		{name: "a report that covers every message listens again", steps: []step{
			{op: offer, mark: mk(200, 200, 1), want: true},
			{op: watch},
			{op: due, at: 100 * ms, want: true},
			{op: sent, at: 100 * ms, mark: mk(200, 200, 1), lsn: 200},
			{op: next, at: 1100 * ms},
			{op: offer, mark: mk(300, 300, 1)},
			{op: offer, mark: mk(300, 300, 2), want: true},
		}},
		{name: "messages a cap kept back are watched at once, and reported once it lifts", steps: []step{
			{op: offer, mark: mk(200, 200, 4), want: true},
			{op: watch},
			{op: due, at: 100 * ms, want: true},
			{op: sent, at: 100 * ms, mark: mk(200, 200, 4), lsn: 150}, // capped at 150
			{op: next, at: 200 * ms},
			{op: offer, mark: mk(300, 300, 5)},  // watching: no wake-up
			{op: due, at: 200 * ms},             // one since the report took four
			{op: due, at: 300 * ms, want: true}, // quiet
			{op: sent, at: 300 * ms, mark: mk(300, 300, 5), lsn: 300},
			{op: next, at: 1300 * ms}, // every message covered
			{op: offer, mark: mk(400, 400, 6), want: true},
		}},
		{name: "messages end at Moved: a keepalive's step past the position sent covers them", steps: []step{
			{op: offer, mark: mk(300, 200, 4), want: true},
			{op: watch},
			{op: due, at: 100 * ms, want: true},
			{op: sent, at: 100 * ms, mark: mk(300, 200, 4), lsn: 200},
			{op: next, at: 1100 * ms},
			{op: offer, mark: mk(310, 200, 4)},
		}},
		{name: "a capped report restarts the backlog", steps: []step{
			{op: offer, mark: mk(200, 200, 4), want: true},
			{op: watch},
			{op: due, at: 100 * ms, want: true},
			{op: sent, at: 100 * ms, mark: mk(200, 200, 4), lsn: 150},
			{op: offer, mark: mk(300, 300, 7)},
			{op: due, at: 200 * ms},
			{op: offer, mark: mk(400, 400, 8)},
			{op: due, at: 300 * ms, want: true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			interval := c.interval
			if interval == 0 {
				interval = time.Second
			}
			t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
			s := NewSchedule(start, interval, 8)
			steps := c.steps
			if c.name != "the first report is due at once" {
				steps = append(append([]step(nil), first...), steps...)
			}
			for i, st := range steps {
				at := t0.Add(st.at)
				var got bool
				switch st.op {
				case offer:
					got = s.Offer(st.mark)
				case watch:
					s.Watch(at)
				case due:
					got = s.Due(at)
				case sent:
					s.Sent(st.mark, st.lsn, at)
				case request:
					s.Request()
				case next:
					if n := s.Next().Sub(t0); n != st.at {
						t.Fatalf("step %d: next at %v, want %v", i, n, st.at)
					}
				}
				if got != st.want {
					t.Fatalf("step %d (%v %+v at %v): %v, want %v", i, st.op, st.mark, st.at, got, st.want)
				}
			}
		})
	}
}

// The marks kept while a cap keeps reports back are bounded.
// Past the bound the newest replaces the last kept.
// A position past them all covers every message.
func TestScheduleBoundsTheCappedMarks(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	s := NewSchedule(start, time.Second, 8)
	for i := uint64(1); i <= 70; i++ {
		m := mk(1000+pglogrepl.LSN(i), 1000+pglogrepl.LSN(i), i)
		s.Offer(m)
		s.Sent(m, 100, t0)
		if len(s.capped) > maxCapped {
			t.Fatalf("%d marks kept, more than %d", len(s.capped), maxCapped)
		}
	}
	if got := fmt.Sprint(s.capped[maxCapped-1].Passed, s.covered); got != "70 0" {
		t.Fatalf("last mark kept, messages covered: %s, want 70 0", got)
	}
	s.Sent(mk(1070, 1070, 70), 1063, t0)
	if s.covered != 63 || len(s.capped) != 1 {
		t.Fatalf("covered %d with %d marks kept, want 63 with 1", s.covered, len(s.capped))
	}
	s.Sent(mk(1070, 1070, 70), 1070, t0)
	if s.covered != 70 || len(s.capped) != 0 {
		t.Fatalf("covered %d with %d marks kept, want 70 with none", s.covered, len(s.capped))
	}
}

func TestIdleStep(t *testing.T) {
	for _, c := range []struct {
		from, to, moved pglogrepl.LSN
		want            bool
	}{
		{100, 200, 100, true},
		{100, 100 + IdleRecordStep - 1, 50, true},
		{100, 100 + IdleRecordStep, 100, false}, // far enough to record
		{100, 200, 150, false},                  // a transaction moved it
		{100, 100, 100, false},                  // no step
		{200, 100, 100, false},                  // backwards
	} {
		if got := IdleStep(c.from, c.to, c.moved); got != c.want {
			t.Errorf("IdleStep(%d, %d, %d) = %v, want %v", c.from, c.to, c.moved, got, c.want)
		}
	}
}
