package faults_test

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"

	"github.com/walbox/walbox/internal/killpoint"
	"github.com/walbox/walbox/test/checker"
)

// The soak summary is one table, printed once after every test ran (TestMain): the kills at each
// kill point, the kills in all, and a row per test or matrix cell with the checker's figures.
// Any test adds to it: soakKill for a kill, soakCell or soakReport for a checker's verdict.
// Every line of the table starts with "SOAK ", which `make soak` shows.

// randomKill is the name soakKill counts a kill at a random moment under, beside the kill points.
const randomKill = "(random moment)"

// soakTable is the summary's figures; soak is the one the tests add to.
type soakTable struct {
	sync.Mutex
	kills map[string]int  // per kill point, and randomKill
	cells map[string]*row // per test or cell name
	order []string        // cell names in the order first recorded
}

var soak soakTable

// row is a cell's figures, summed over its runs.
type row struct {
	runs, committed, lost, phantom, duplicates int
}

// soakKill counts one kill of walbox at point (a name of killpoint.Points, or randomKill).
func soakKill(point string) { soak.kill(point) }

func (s *soakTable) kill(point string) {
	s.Lock()
	defer s.Unlock()
	if s.kills == nil {
		s.kills = map[string]int{}
	}
	s.kills[point]++
}

// soakCell records one run of the cell name (a test's or a matrix cell's name) with the checker's
// figures: rows committed, lost, phantom, and deliveries beyond the first. The rounds of a test
// (subtests round_N) add up in one row.
func soakCell(name string, committed, lost, phantom, duplicates int) {
	soak.cell(roundName.ReplaceAllString(name, ""), committed, lost, phantom, duplicates)
}

// roundName is the part of a test's name that names its round.
var roundName = regexp.MustCompile(`/round_[0-9]+`)

func (s *soakTable) cell(name string, committed, lost, phantom, duplicates int) {
	s.Lock()
	defer s.Unlock()
	if s.cells == nil {
		s.cells = map[string]*row{}
	}
	r := s.cells[name]
	if r == nil {
		r = &row{}
		s.cells[name] = r
		s.order = append(s.order, name)
	}
	r.runs++
	r.committed += committed
	r.lost += lost
	r.phantom += phantom
	r.duplicates += duplicates
}

// soakReport records one run of the cell name with the figures of the checker's report rep.
func soakReport(name string, rep checker.Report) {
	soakCell(name, rep.Committed, rep.Lost, rep.Phantom, rep.Duplicated)
}

// printSoakSummary writes the table to w, if any test recorded something, and reports whether
// every cell has zero lost and zero phantom.
func printSoakSummary(w io.Writer) bool { return soak.print(w) }

func (s *soakTable) print(w io.Writer) bool {
	s.Lock()
	defer s.Unlock()
	if len(s.kills) == 0 && len(s.cells) == 0 {
		return true
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	line := func(cols ...any) {
		for len(cols) > 0 && cols[len(cols)-1] == "" {
			cols = cols[:len(cols)-1]
		}
		fmt.Fprint(tw, "SOAK")
		for _, c := range cols {
			fmt.Fprint(tw, "\t", c)
		}
		fmt.Fprintln(tw)
	}
	line("kill point", "kills", "", "", "", "")
	all := 0
	for _, p := range append(slices.Clone(killpoint.Points), randomKill) {
		n := s.kills[p]
		all += n
		if n == 0 && p != randomKill {
			line(p, "0 (not hit)", "", "", "", "")
			continue
		}
		line(p, n, "", "", "", "")
	}
	line("kills in all", all, "", "", "", "")
	line("cell", "runs", "committed", "lost", "phantom", "duplicates")
	var sum row
	for _, name := range s.order {
		r := s.cells[name]
		line(name, r.runs, r.committed, r.lost, r.phantom, r.duplicates)
		sum.runs += r.runs
		sum.committed += r.committed
		sum.lost += r.lost
		sum.phantom += r.phantom
		sum.duplicates += r.duplicates
	}
	line(fmt.Sprintf("cells run: %d", len(s.order)), sum.runs, sum.committed, sum.lost, sum.phantom, sum.duplicates)
	ok := sum.lost == 0 && sum.phantom == 0
	verdict := "zero lost, zero phantom"
	if !ok {
		verdict = "ROWS LOST OR PHANTOM"
	}
	line("checker", verdict, "", "", "", "")
	_ = tw.Flush()
	return ok
}

// The table names every kill point, a point no test killed at as not hit, the kills in all, each
// cell's figures summed over its runs, and whether any cell lost or invented a row.
func TestSoakSummaryTable(t *testing.T) {
	var s soakTable
	if !s.print(io.Discard) {
		t.Error("an empty table reports a loss")
	}
	s.kill("begin")
	s.kill("begin")
	s.kill(randomKill)
	s.cell("TestA", 10, 0, 0, 3)
	s.cell("TestA", 5, 0, 0, 1)
	s.cell("cell 7", 8, 0, 0, 0)
	var b strings.Builder
	if !s.print(&b) {
		t.Errorf("a table without a loss reports one:\n%s", b.String())
	}
	out := b.String()
	t.Logf("the table:\n%s", out)
	for _, want := range []string{
		`(?m)^SOAK +begin +2 *$`,
		`(?m)^SOAK +row\.next +0 \(not hit\) *$`,
		`(?m)^SOAK +\(random moment\) +1 *$`,
		`(?m)^SOAK +kills in all +3 *$`,
		`(?m)^SOAK +TestA +2 +15 +0 +0 +4 *$`,
		`(?m)^SOAK +cells run: 2 +3 +23 +0 +0 +4 *$`,
		`(?m)^SOAK +checker +zero lost, zero phantom *$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("the table has no line matching %s:\n%s", want, out)
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, "SOAK ") {
			t.Errorf("line %q does not start with SOAK", l)
		}
	}
	s.cell("cell 8", 4, 1, 0, 0)
	b.Reset()
	if s.print(&b) || !strings.Contains(b.String(), "ROWS LOST OR PHANTOM") {
		t.Errorf("a table with a lost row does not report it:\n%s", b.String())
	}
}
