package faults_test

import (
	"fmt"
	"strings"
	"testing"
)

// dimension is one of walbox's modes that the seam matrix varies, with the values it takes.
type dimension struct {
	name   string
	values []string
}

// cell is one combination of the matrix: a value index per dimension, in the order of dims.
type cell []int

// pairOf is a value of one dimension together with a value of a later one.
type pairOf struct{ d1, v1, d2, v2 int }

// refusal is a pair of values walbox refuses to run together: the cell holding it checks that
// the command exits with code, printing one line that contains msg.
type refusal struct {
	a, b string // dimension=value
	cmd  string // the command that refuses: "run", "migrate", "recover", "reshard"
	code int
	msg  string
}

// value returns the index of "name=value" in dims, or fails.
func valueOf(dims []dimension, spec string) (d, v int, err error) {
	name, val, _ := strings.Cut(spec, "=")
	for i, dim := range dims {
		if dim.name != name {
			continue
		}
		for j, x := range dim.values {
			if x == val {
				return i, j, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("no mode %s", spec)
}

// refusedPairs turns the refusals into pairs of value indexes.
func refusedPairs(dims []dimension, refused []refusal) (map[pairOf]refusal, error) {
	out := map[pairOf]refusal{}
	for _, r := range refused {
		d1, v1, err := valueOf(dims, r.a)
		if err != nil {
			return nil, err
		}
		d2, v2, err := valueOf(dims, r.b)
		if err != nil {
			return nil, err
		}
		if d1 > d2 {
			d1, v1, d2, v2 = d2, v2, d1, v1
		}
		out[pairOf{d1, v1, d2, v2}] = r
	}
	return out, nil
}

// pairsOf lists every pair of values of two different dimensions, in a fixed order.
func pairsOf(dims []dimension) []pairOf {
	var out []pairOf
	for d1 := range dims {
		for d2 := d1 + 1; d2 < len(dims); d2++ {
			for v1 := range dims[d1].values {
				for v2 := range dims[d2].values {
					out = append(out, pairOf{d1, v1, d2, v2})
				}
			}
		}
	}
	return out
}

// covers reports whether c holds both values of p.
func (c cell) covers(p pairOf) bool { return c[p.d1] == p.v1 && c[p.d2] == p.v2 }

// refusedIn returns the refusal c holds, if any.
func (c cell) refusedIn(refused map[pairOf]refusal) (refusal, bool) {
	for p, r := range refused {
		if c.covers(p) {
			return r, true
		}
	}
	return refusal{}, false
}

// coveringArray returns cells in which every pair of values of two dimensions appears at least
// once. It is greedy and deterministic: each cell starts from the first pair no cell covers yet,
// and fills each other dimension, in order, with the value that covers the most pairs still
// uncovered together with the values chosen so far (the lowest value on a tie). A cell never
// holds a refused pair: each refused pair gets a cell of its own, the other dimensions at their
// first value that refuses nothing more (the cheapest to set up), in which walbox must refuse.
func coveringArray(dims []dimension, refused map[pairOf]refusal) (run, refusals []cell) {
	all := pairsOf(dims)
	everything := map[pairOf]bool{}
	for _, p := range all {
		everything[p] = true
	}
	covered := map[pairOf]bool{}
	for p := range refused {
		covered[p] = true
		refusals = append(refusals, fill(dims, cellWith(dims, p), refused, everything))
	}
	sortCells(refusals)
	for {
		var start *pairOf
		for i, p := range all {
			if !covered[p] {
				start = &all[i]
				break
			}
		}
		if start == nil {
			return run, refusals
		}
		c := fill(dims, cellWith(dims, *start), refused, covered)
		for _, p := range all {
			if c.covers(p) {
				covered[p] = true
			}
		}
		run = append(run, c)
	}
}

// cellWith returns a cell holding the pair p, every other dimension unset (-1).
func cellWith(dims []dimension, p pairOf) cell {
	c := make(cell, len(dims))
	for i := range c {
		c[i] = -1
	}
	c[p.d1], c[p.d2] = p.v1, p.v2
	return c
}

// fill sets each unset dimension of c to the value that adds no refused pair and covers the most
// uncovered pairs with the values already set.
func fill(dims []dimension, c cell, refused map[pairOf]refusal, covered map[pairOf]bool) cell {
	for d := range dims {
		if c[d] >= 0 {
			continue
		}
		best, bestGain := -1, -1
		for v := range dims[d].values {
			gain, ok := 0, true
			for e := range dims {
				if e == d || c[e] < 0 {
					continue
				}
				p := pairOf{e, c[e], d, v}
				if e > d {
					p = pairOf{d, v, e, c[e]}
				}
				if _, bad := refused[p]; bad {
					ok = false
					break
				}
				if !covered[p] {
					gain++
				}
			}
			if ok && gain > bestGain {
				best, bestGain = v, gain
			}
		}
		if best < 0 {
			best = 0 // every value refuses: the refusal is what the cell checks
		}
		c[d] = best
	}
	return c
}

// sortCells orders cells by their values, so that map order does not show.
func sortCells(cells []cell) {
	less := func(a, b cell) bool {
		for i := range a {
			if a[i] != b[i] {
				return a[i] < b[i]
			}
		}
		return false
	}
	for i := 1; i < len(cells); i++ {
		for j := i; j > 0 && less(cells[j], cells[j-1]); j-- {
			cells[j], cells[j-1] = cells[j-1], cells[j]
		}
	}
}

// name is the cell's subtest name: its values, comma-separated.
func (c cell) name(dims []dimension) string {
	parts := make([]string, len(c))
	for i, v := range c {
		parts[i] = dims[i].values[v]
	}
	return strings.Join(parts, ",")
}

// The generator covers every pair of values of two dimensions, except the refused pairs, which
// each have a refusal cell; no cell to run holds a refused pair; and the same input gives the
// same cells. Checked on the matrix itself and on a small made-up one.
func TestCoveringArrayCoversEveryPair(t *testing.T) {
	small := []dimension{{"a", []string{"0", "1", "2"}}, {"b", []string{"x", "y"}}, {"c", []string{"p", "q", "r", "s"}}, {"d", []string{"u", "v"}}}
	for _, tc := range []struct {
		name    string
		dims    []dimension
		refused []refusal
	}{
		{"small", small, []refusal{{a: "a=2", b: "c=s"}, {a: "b=y", b: "d=v"}}},
		{"seams", seamDimensions, seamRefusals},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refused, err := refusedPairs(tc.dims, tc.refused)
			if err != nil {
				t.Fatal(err)
			}
			run, refusals := coveringArray(tc.dims, refused)
			for _, c := range run {
				if r, bad := c.refusedIn(refused); bad {
					t.Errorf("cell %s holds the refused pair %s with %s", c.name(tc.dims), r.a, r.b)
				}
			}
			for _, p := range pairsOf(tc.dims) {
				in := run
				if _, bad := refused[p]; bad {
					in = refusals
				}
				found := false
				for _, c := range in {
					found = found || c.covers(p)
				}
				if !found {
					t.Errorf("no cell holds %s=%s with %s=%s", tc.dims[p.d1].name, tc.dims[p.d1].values[p.v1],
						tc.dims[p.d2].name, tc.dims[p.d2].values[p.v2])
				}
			}
			if len(refusals) != len(refused) {
				t.Errorf("%d refusal cells for %d refused pairs", len(refusals), len(refused))
			}
			again, _ := coveringArray(tc.dims, refused)
			for i := range again {
				if again[i].name(tc.dims) != run[i].name(tc.dims) {
					t.Fatalf("two runs differ at cell %d: %s, then %s", i, run[i].name(tc.dims), again[i].name(tc.dims))
				}
			}
			t.Logf("%d cells to run, %d refusal cells, %d pairs", len(run), len(refusals), len(pairsOf(tc.dims)))
		})
	}
}
