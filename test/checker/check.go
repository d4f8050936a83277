package checker

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Row is a committed outbox row as the Writer knows it.
type Row struct {
	ID        string // the row's id, as the AMQP message id carries it
	Aggregate string
	Seq       int64
	Emitted   bool // written through the emit function: a message without a row

	xid int64 // the writing transaction's id, when it wrote through the emit function
}

// Delivery is one message as the consumer received it.
type Delivery struct {
	ID          string // AMQP message id; "" counts as malformed
	Aggregate   string // from the body
	Seq         int64  // from the body
	Malformed   bool   // the body is not the Writer's JSON
	Redelivered bool   // the broker's redelivered flag
}

// Violation is a first delivery that came after a higher seq of the same aggregate.
type Violation struct {
	Aggregate string
	ID        string
	Seq       int64 // the seq delivered
	After     int64 // the highest seq first-delivered before it
	Index     int   // position in the deliveries
}

// maxSamples bounds the ids kept in a Report for each kind of anomaly.
const maxSamples = 10

// Report is the verdict of Check.
type Report struct {
	Committed       int // rows committed
	Delivered       int // deliveries, duplicates included
	Unique          int // committed rows delivered at least once
	Lost            int // committed, never delivered
	Phantom         int // distinct ids delivered but never committed
	Duplicated      int // deliveries beyond the first of each id
	Redelivered     int // deliveries the broker flagged as redelivered
	OrderViolations int // first deliveries below an earlier first delivery's seq, per aggregate
	Malformed       int // deliveries without an id or with a body that is not the Writer's
	Mismatched      int // deliveries whose body disagrees with the committed row
	Aggregates      int // aggregates among the committed rows

	// Unresolved is the number of rows whose commit outcome the Writer could not resolve; the
	// caller sets it. Such rows are neither committed nor phantom, so it must be 0 for a verdict.
	Unresolved int
	// TimedOut is set by the caller when it stopped waiting before every committed row arrived;
	// Stalled when it stopped because nothing arrived for a while.
	TimedOut bool
	Stalled  bool
	// Overflow is set when the consumer kept no more deliveries past its bound: the verdict is
	// incomplete.
	Overflow bool
	// Elapsed is how long the caller waited for the deliveries.
	Elapsed time.Duration

	LostIDs    []string    // up to 10 of them
	PhantomIDs []string    // up to 10 of them
	Violations []Violation // up to 10 of them
}

// Check compares the committed rows with the deliveries, in the order they were received.
func Check(committed []Row, deliveries []Delivery) Report {
	rows := make(map[string]Row, len(committed))
	aggregates := map[string]bool{}
	for _, r := range committed {
		rows[r.ID] = r
		aggregates[r.Aggregate] = true
	}
	rep := Report{Committed: len(rows), Delivered: len(deliveries), Aggregates: len(aggregates)}
	seen := make(map[string]bool, len(rows))
	highest := map[string]int64{} // per aggregate, the highest seq first-delivered so far
	for i, d := range deliveries {
		if d.Redelivered {
			rep.Redelivered++
		}
		if d.ID == "" || d.Malformed {
			rep.Malformed++
		}
		if d.ID == "" {
			continue
		}
		if seen[d.ID] {
			rep.Duplicated++
			continue
		}
		seen[d.ID] = true
		r, ok := rows[d.ID]
		if !ok {
			rep.Phantom++
			rep.PhantomIDs = sample(rep.PhantomIDs, d.ID)
			continue
		}
		rep.Unique++
		if !d.Malformed && (d.Aggregate != r.Aggregate || d.Seq != r.Seq) {
			rep.Mismatched++
		}
		// Order is judged by the committed row, which the body was just checked against.
		if top, ok := highest[r.Aggregate]; ok && r.Seq < top {
			rep.OrderViolations++
			if len(rep.Violations) < maxSamples {
				rep.Violations = append(rep.Violations, Violation{Aggregate: r.Aggregate, ID: r.ID, Seq: r.Seq, After: top, Index: i})
			}
			continue
		}
		highest[r.Aggregate] = r.Seq
	}
	for _, r := range committed {
		if !seen[r.ID] {
			rep.Lost++
			rep.LostIDs = sample(rep.LostIDs, r.ID)
			seen[r.ID] = true // a row listed twice is lost once
		}
	}
	return rep
}

func sample(ids []string, id string) []string {
	if len(ids) < maxSamples {
		ids = append(ids, id)
	}
	return ids
}

// Err returns nil when nothing was lost, nothing appeared that was never committed, first
// deliveries kept order, every delivery was well-formed and every commit outcome is known;
// otherwise an error naming each problem.
func (r Report) Err() error {
	var problems []string
	add := func(n int, what string, ids []string) {
		if n == 0 {
			return
		}
		p := fmt.Sprintf("%d %s", n, what)
		if len(ids) > 0 {
			p += " (e.g. " + strings.Join(ids, ", ") + ")"
		}
		problems = append(problems, p)
	}
	add(r.Lost, "lost", r.LostIDs)
	add(r.Phantom, "phantom", r.PhantomIDs)
	var vs []string
	for _, v := range r.Violations {
		vs = append(vs, fmt.Sprintf("%s seq %d after %d", v.Aggregate, v.Seq, v.After))
	}
	add(r.OrderViolations, "order violations", vs)
	add(r.Malformed, "malformed", nil)
	add(r.Mismatched, "mismatched", nil)
	add(r.Unresolved, "unresolved commits", nil)
	if r.Overflow {
		problems = append(problems, "too many deliveries to judge")
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New("checker: " + strings.Join(problems, "; "))
}

// String is a one-line summary with every count.
func (r Report) String() string {
	s := fmt.Sprintf("committed=%d delivered=%d unique=%d lost=%d phantom=%d duplicated=%d redelivered=%d "+
		"order_violations=%d malformed=%d mismatched=%d unresolved=%d aggregates=%d",
		r.Committed, r.Delivered, r.Unique, r.Lost, r.Phantom, r.Duplicated, r.Redelivered,
		r.OrderViolations, r.Malformed, r.Mismatched, r.Unresolved, r.Aggregates)
	if r.Elapsed > 0 {
		s += " waited=" + r.Elapsed.Round(time.Millisecond).String()
	}
	if r.TimedOut {
		s += " TIMED-OUT"
	}
	if r.Stalled {
		s += " STALLED"
	}
	if r.Overflow {
		s += " OVERFLOW"
	}
	return s
}
