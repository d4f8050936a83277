package checker_test

import (
	"strings"
	"testing"

	"github.com/walbox/walbox/test/checker"
)

// rows builds committed rows from "id:aggregate:seq" triples.
func rows(specs ...string) []checker.Row {
	out := make([]checker.Row, len(specs))
	for i, s := range specs {
		d := delivery(s)
		out[i] = checker.Row{ID: d.ID, Aggregate: d.Aggregate, Seq: d.Seq}
	}
	return out
}

// delivery builds a well-formed delivery from "id:aggregate:seq".
func delivery(spec string) checker.Delivery {
	f := strings.Split(spec, ":")
	var seq int64
	for _, c := range f[2] {
		seq = seq*10 + int64(c-'0')
	}
	return checker.Delivery{ID: f[0], Aggregate: f[1], Seq: seq}
}

func deliveries(specs ...string) []checker.Delivery {
	out := make([]checker.Delivery, len(specs))
	for i, s := range specs {
		out[i] = delivery(s)
	}
	return out
}

func TestCheck(t *testing.T) {
	committed := rows("a1:A:1", "b1:B:1", "a2:A:2", "a3:A:3", "b2:B:2")
	tests := []struct {
		name       string
		committed  []checker.Row
		deliveries []checker.Delivery
		want       checker.Report
	}{
		{
			name:       "every row once in commit order is clean",
			committed:  committed,
			deliveries: deliveries("a1:A:1", "b1:B:1", "a2:A:2", "a3:A:3", "b2:B:2"),
			want:       checker.Report{Committed: 5, Delivered: 5, Unique: 5, Aggregates: 2},
		},
		{
			name:       "a committed row never delivered is lost",
			committed:  committed,
			deliveries: deliveries("a1:A:1", "b1:B:1", "a3:A:3", "b2:B:2"),
			want:       checker.Report{Committed: 5, Delivered: 4, Unique: 4, Lost: 1, Aggregates: 2},
		},
		{
			name:       "an id never committed is a phantom, counted once however often it comes",
			committed:  rows("a1:A:1"),
			deliveries: deliveries("a1:A:1", "zz:A:9", "zz:A:9"),
			want:       checker.Report{Committed: 1, Delivered: 3, Unique: 1, Phantom: 1, Duplicated: 1, Aggregates: 1},
		},
		{
			name:      "a replay repeats older seqs: duplicates, not order violations",
			committed: committed,
			deliveries: deliveries("a1:A:1", "b1:B:1", "a2:A:2",
				"a1:A:1", "b1:B:1", "a2:A:2", "a3:A:3", "b2:B:2"),
			want: checker.Report{Committed: 5, Delivered: 8, Unique: 5, Duplicated: 3, Aggregates: 2},
		},
		{
			name:       "a first delivery below an earlier first delivery of its aggregate is a violation",
			committed:  committed,
			deliveries: deliveries("a1:A:1", "a3:A:3", "a2:A:2", "b1:B:1", "b2:B:2"),
			want:       checker.Report{Committed: 5, Delivered: 5, Unique: 5, OrderViolations: 1, Aggregates: 2},
		},
		{
			name:       "order is judged against the highest seq so far, not only the previous one",
			committed:  rows("a1:A:1", "a2:A:2", "a3:A:3", "a4:A:4", "a5:A:5"),
			deliveries: deliveries("a1:A:1", "a5:A:5", "a2:A:2", "a3:A:3", "a4:A:4"),
			want:       checker.Report{Committed: 5, Delivered: 5, Unique: 5, OrderViolations: 3, Aggregates: 1},
		},
		{
			name:       "aggregates are ordered independently",
			committed:  committed,
			deliveries: deliveries("b1:B:1", "b2:B:2", "a1:A:1", "a2:A:2", "a3:A:3"),
			want:       checker.Report{Committed: 5, Delivered: 5, Unique: 5, Aggregates: 2},
		},
		{
			name:      "redelivered flags are counted, and the redelivery is a duplicate",
			committed: rows("a1:A:1"),
			deliveries: []checker.Delivery{
				{ID: "a1", Aggregate: "A", Seq: 1},
				{ID: "a1", Aggregate: "A", Seq: 1, Redelivered: true},
			},
			want: checker.Report{Committed: 1, Delivered: 2, Unique: 1, Duplicated: 1, Redelivered: 1, Aggregates: 1},
		},
		{
			name:       "a body that disagrees with the committed row is mismatched",
			committed:  rows("a1:A:1", "a2:A:2"),
			deliveries: deliveries("a1:A:1", "a2:A:7"),
			want:       checker.Report{Committed: 2, Delivered: 2, Unique: 2, Mismatched: 1, Aggregates: 1},
		},
		{
			name:      "a delivery without an id or with a foreign body is malformed",
			committed: rows("a1:A:1"),
			deliveries: []checker.Delivery{
				{ID: "", Aggregate: "A", Seq: 1},
				{ID: "a1", Malformed: true},
			},
			want: checker.Report{Committed: 1, Delivered: 2, Unique: 1, Malformed: 2, Aggregates: 1},
		},
		{
			name:       "nothing committed and nothing delivered is clean",
			committed:  nil,
			deliveries: nil,
			want:       checker.Report{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checker.Check(tt.committed, tt.deliveries)
			got.LostIDs, got.PhantomIDs, got.Violations = nil, nil, nil
			if got.String() != tt.want.String() {
				t.Errorf("Check:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestCheckSamples(t *testing.T) {
	rep := checker.Check(rows("a1:A:1", "a2:A:2", "a3:A:3"), deliveries("a2:A:2", "a1:A:1", "x:A:4"))
	if len(rep.LostIDs) != 1 || rep.LostIDs[0] != "a3" {
		t.Errorf("LostIDs = %v, want [a3]", rep.LostIDs)
	}
	if len(rep.PhantomIDs) != 1 || rep.PhantomIDs[0] != "x" {
		t.Errorf("PhantomIDs = %v, want [x]", rep.PhantomIDs)
	}
	want := checker.Violation{Aggregate: "A", ID: "a1", Seq: 1, After: 2, Index: 1}
	if len(rep.Violations) != 1 || rep.Violations[0] != want {
		t.Errorf("Violations = %+v, want [%+v]", rep.Violations, want)
	}
	err := rep.Err()
	if err == nil {
		t.Fatal("Err = nil for a report with lost, phantom and out-of-order messages")
	}
	for _, part := range []string{"1 lost (e.g. a3)", "1 phantom (e.g. x)", "1 order violations (e.g. A seq 1 after 2)"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("Err = %q, want it to mention %q", err, part)
		}
	}
}

func TestCheckSamplesAreBounded(t *testing.T) {
	var committed []checker.Row
	for i := range 50 {
		committed = append(committed, checker.Row{ID: string(rune('a'+i%26)) + string(rune('a'+i/26)), Aggregate: "A", Seq: int64(i + 1)})
	}
	rep := checker.Check(committed, nil)
	if rep.Lost != 50 || len(rep.LostIDs) != 10 {
		t.Errorf("Lost = %d with %d samples, want 50 with 10", rep.Lost, len(rep.LostIDs))
	}
}

func TestReportErr(t *testing.T) {
	tests := []struct {
		name string
		rep  checker.Report
		want string // "" for nil
	}{
		{"duplicates and redeliveries are allowed", checker.Report{Committed: 3, Delivered: 9, Unique: 3, Duplicated: 6, Redelivered: 2}, ""},
		{"malformed deliveries fail", checker.Report{Malformed: 1}, "1 malformed"},
		{"mismatched deliveries fail", checker.Report{Mismatched: 2}, "2 mismatched"},
		{"unresolved commits fail", checker.Report{Unresolved: 4}, "4 unresolved commits"},
		{"an overflowing consumer fails", checker.Report{Overflow: true}, "too many deliveries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.rep.Err()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Err = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestReportString(t *testing.T) {
	rep := checker.Report{Committed: 10, Delivered: 12, Unique: 10, Duplicated: 2, Aggregates: 3, TimedOut: true}
	got := rep.String()
	want := "committed=10 delivered=12 unique=10 lost=0 phantom=0 duplicated=2 redelivered=0 order_violations=0 " +
		"malformed=0 mismatched=0 unresolved=0 aggregates=3 TIMED-OUT"
	if got != want {
		t.Errorf("String:\n got %s\nwant %s", got, want)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, body string
		want       checker.Delivery
	}{
		{"the writer's payload", `{"aggregate": "agg-3", "seq": 17, "pad": "xx"}`, checker.Delivery{ID: "m", Aggregate: "agg-3", Seq: 17}},
		{"not JSON", `seq 17`, checker.Delivery{ID: "m", Malformed: true}},
		{"no aggregate", `{"seq": 17}`, checker.Delivery{ID: "m", Malformed: true}},
		{"no seq", `{"aggregate": "agg-3"}`, checker.Delivery{ID: "m", Malformed: true}},
		{"seq of the wrong type", `{"aggregate": "agg-3", "seq": "17"}`, checker.Delivery{ID: "m", Malformed: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checker.Parse("m", []byte(tt.body)); got != tt.want {
				t.Errorf("Parse = %+v, want %+v", got, tt.want)
			}
		})
	}
}
