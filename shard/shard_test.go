package shard_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/walbox/walbox/shard"
)

// Values PostgreSQL 15 returned for SELECT hashtext(...) on x86-64.
var serverHashes = map[string]int32{
	"":            -1477818771,
	"a":           1075015857,
	"hello world": 1021725223,
	"agg-1":       -46586821,
}

func TestHashTextMatchesTheServer(t *testing.T) {
	for s, want := range serverHashes {
		if got := shard.HashText(s); got != want {
			t.Errorf("HashText(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestNames(t *testing.T) {
	s := shard.Set{Slot: "walbox", Publication: "pub", N: 3}
	if got, want := s.SlotName(2), "walbox_s2of3"; got != want {
		t.Errorf("SlotName(2) = %q, want %q", got, want)
	}
	if got, want := s.PublicationName(0), "pub_s0of3"; got != want {
		t.Errorf("PublicationName(0) = %q, want %q", got, want)
	}
	single := shard.Set{Slot: "walbox", Publication: "pub", N: 1}
	if single.SlotName(0) != "walbox" || single.PublicationName(0) != "pub" || single.Filter(0) != "" {
		t.Errorf("a set of one is the single slot: %q %q %q", single.SlotName(0), single.PublicationName(0), single.Filter(0))
	}
	for _, tc := range []struct {
		name string
		k, n int
		ok   bool
	}{
		{"walbox_s0of3", 0, 3, true}, {"walbox_s12of16", 12, 16, true}, {"walbox", 0, 1, true},
		{"walbox_s3of3", 0, 0, false}, {"walbox_s01of3", 0, 0, false}, {"other_s0of3", 0, 0, false},
		{"walbox_s0of1", 0, 0, false}, {"walbox_x_s0of2", 0, 0, false},
	} {
		k, n, ok := shard.ParseName("walbox", tc.name)
		if ok != tc.ok || (ok && (k != tc.k || n != tc.n)) {
			t.Errorf("ParseName(walbox, %q) = %d, %d, %t; want %d, %d, %t", tc.name, k, n, ok, tc.k, tc.n, tc.ok)
		}
	}
	long := shard.Set{Slot: "a_slot_name_that_is_exactly_fifty_eight_characters_long_xx", Publication: "p", N: 10}
	if err := long.Validate(); err == nil {
		t.Errorf("Validate accepted %s, which PostgreSQL would truncate", long.SlotName(9))
	}
}

// The filter as the server shows it reads back as the shard it was written for; filters walbox
// did not write are not taken for shards.
func TestParseFilter(t *testing.T) {
	for _, tc := range []struct {
		filter  string
		col     string
		k, n    int
		ok      bool
		comment string
	}{
		{"(((hashtext(COALESCE(aggregate_id, ''::text)) & 2147483647) % 3) = 0)", "aggregate_id", 0, 3, true, "as PostgreSQL 15 shows it"},
		{"(((hashtext(COALESCE(aggregate_id, ''::text)) & 2147483647) % 16) = 15)", "aggregate_id", 15, 16, true, "two digits"},
		{"", "", 0, 1, true, "no filter: the single slot"},
		{"(((hashtext(COALESCE(aggregate_id, ''::text)) & 2147483647) % 3) = 3)", "", 0, 0, false, "k out of range"},
		{"((abs(hashtext(aggregate_id)) % 3) = 0)", "", 0, 0, false, "another expression"},
		{"(event_type = 'x'::text)", "", 0, 0, false, "an unrelated filter"},
	} {
		col, k, n, ok := shard.ParseFilter(tc.filter)
		if ok != tc.ok || (ok && (col != tc.col || k != tc.k || n != tc.n)) {
			t.Errorf("%s: ParseFilter(%q) = %q, %d, %d, %t", tc.comment, tc.filter, col, k, n, ok)
		}
	}
}

// Property: for any id and count, Of names exactly one shard in range, and a set's filters are
// distinct per shard. (That the server's filters agree with Of is TestFiltersOnTheServer.)
func TestOfIsInRangeAndSpreads(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 16; n++ {
		counts := make([]int, n)
		for range 4000 {
			id := randomID(rng)
			k := shard.Of(id, n)
			if k < 0 || k >= n {
				t.Fatalf("Of(%q, %d) = %d, out of range", id, n, k)
			}
			if k != shard.Of(id, n) {
				t.Fatalf("Of(%q, %d) is not stable", id, n)
			}
			counts[k]++
		}
		for k, c := range counts {
			if c < 4000/n/2 {
				t.Errorf("n=%d: shard %d got %d of 4000 ids (%v): the hash does not spread", n, k, c, counts)
			}
		}
	}
}

// randomID returns ids of the kinds aggregates have: numbers, UUID-like, words, non-ASCII, and
// lengths around the hash's 12-byte blocks.
func randomID(rng *rand.Rand) string {
	switch rng.IntN(5) {
	case 0:
		return fmt.Sprint(rng.Int64())
	case 1:
		return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", rng.Uint32(), rng.Uint32()&0xffff, rng.Uint32()&0xffff, rng.Uint32()&0xffff, rng.Uint64()&0xffffffffffff)
	case 2:
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		return string(b)
	case 3:
		return fmt.Sprintf("Bestellung-ü-%d-日本", rng.IntN(1e6))
	default:
		return fmt.Sprintf("agg-%d", rng.IntN(1e9))
	}
}
