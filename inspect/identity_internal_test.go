package inspect

import "testing"

func TestCoverageHolds(t *testing.T) {
	const rec = "publication 16400@731, tables 16385:16401"
	for _, c := range []struct {
		name, now, recorded string
		want                bool
	}{
		{"the same", rec, rec, true},
		{"a table added", "publication 16400@731, tables 16385:16401 16390:16402", rec, true},
		{"a table added, listed first", "publication 16400@731, tables 16390:16402 16385:16401", rec, true},
		{"the table's place in the publication changed", "publication 16400@731, tables 16385:16403", rec, false},
		{"the table swapped", "publication 16400@731, tables 16395:16404", rec, false},
		{"the publication altered", "publication 16400@740, tables 16385:16401", rec, false},
		{"the publication recreated", "publication 16410@745, tables 16385:16411", rec, false},
		{"a recorded table no longer mapped", "publication 16400@731, tables 16390:16402",
			"publication 16400@731, tables 16385:16401 16390:16402", false},
		{"a table missing now", "publication 16400@731, tables -: 16385:16401", rec, false},
		{"a table not in the publication now", "publication 16400@731, tables 16390: 16385:16401", rec, false},
		{"nothing recorded", rec, "", false},
		{"garbage", "tables", rec, false},
	} {
		if got := CoverageHolds(c.now, c.recorded); got != c.want {
			t.Errorf("%s: CoverageHolds(%q, %q) = %v, want %v", c.name, c.now, c.recorded, got, c.want)
		}
	}
}
