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
		{"a table added, covered by its schema", "publication 16400@731, tables 16390: 16385:16401", rec, true},
		{"covered by its schema, the same", "publication 16400@731, tables 16385:, schemas 2200:16402",
			"publication 16400@731, tables 16385:, schemas 2200:16402", true},
		{"covered by its schema, recorded before the schemas were read", "publication 16400@731, tables 16385:, schemas 2200:16402",
			"publication 16400@731, tables 16385:", true},
		{"the schema dropped and added again", "publication 16400@731, tables 16385:, schemas 2200:16410",
			"publication 16400@731, tables 16385:, schemas 2200:16402", false},
		{"the schema gone from the publication", "publication 16400@731, tables 16385:16403",
			"publication 16400@731, tables 16385:, schemas 2200:16402", false},
		{"nothing recorded", rec, "", false},
		{"garbage", "tables", rec, false},
	} {
		if got := CoverageHolds(c.now, c.recorded); got != c.want {
			t.Errorf("%s: CoverageHolds(%q, %q) = %v, want %v", c.name, c.now, c.recorded, got, c.want)
		}
	}
}
