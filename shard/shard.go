package shard

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// column is the outbox column the shards are split on.
const column = "aggregate_id"

// MaxShards bounds a set: every shard's slot holds a walsender that decodes all of the WAL.
const MaxShards = 64

// Set is a set of N shards of the outbox table, named after the base slot and publication. N = 1
// is the single-slot setup.
type Set struct {
	Slot, Publication string // the base names
	N                 int
}

// Validate reports a count out of range or a derived name PostgreSQL would truncate.
func (s Set) Validate() error {
	if s.N < 1 || s.N > MaxShards {
		return fmt.Errorf("shards %d: must be 1 to %d", s.N, MaxShards)
	}
	for _, name := range []string{s.SlotName(s.N - 1), s.PublicationName(s.N - 1)} {
		if len(name) > 63 {
			return fmt.Errorf("shard name %s is longer than 63 bytes: shorten the slot or publication name", name)
		}
	}
	return nil
}

// shardName derives the name of shard k of n from base: base itself for a single slot, else
// base_s<k>of<n> (walbox_s0of3).
func shardName(base string, k, n int) string {
	if n == 1 {
		return base
	}
	return fmt.Sprintf("%s_s%dof%d", base, k, n)
}

// SlotName is the slot of shard k.
func (s Set) SlotName(k int) string { return shardName(s.Slot, k, s.N) }

// PublicationName is the publication of shard k.
func (s Set) PublicationName(k int) string { return shardName(s.Publication, k, s.N) }

// Filter is the row filter of shard k's publication, as written in CREATE PUBLICATION; empty for
// a single slot.
func (s Set) Filter(k int) string {
	if s.N == 1 {
		return ""
	}
	return fmt.Sprintf("((pg_catalog.hashtext(coalesce(%s, '')) & 2147483647) %% %d = %d)", column, s.N, k)
}

// String names the set for messages: "3 shards (walbox_s0of3 ... walbox_s2of3)" or "the single
// slot walbox".
func (s Set) String() string {
	if s.N == 1 {
		return "the single slot " + s.Slot
	}
	return fmt.Sprintf("%d shards (%s ... %s)", s.N, s.PublicationName(0), s.PublicationName(s.N-1))
}

// Of returns the shard of n that an aggregate id belongs to. It is the one the publications' row
// filters select on a little-endian server. A NULL aggregate id belongs where the empty string
// does.
func Of(aggregateID string, n int) int {
	if n <= 1 {
		return 0
	}
	return int(uint32(HashText(aggregateID))&0x7fffffff) % n
}

// filterText is the row filter as the server shows it (pg_publication_tables.rowfilter).
var filterText = regexp.MustCompile(`^\(\(\(hashtext\(COALESCE\(("?[^,]+"?), ''::text\)\) & 2147483647\) % (\d+)\) = (\d+)\)$`)

// ParseFilter reads which shard a publication's row filter selects, as the server shows it. It
// returns k of n, on column. ok is false for a filter walbox did not write. An empty filter is the
// single slot (k 0 of 1).
func ParseFilter(filter string) (column string, k, n int, ok bool) {
	if filter == "" {
		return "", 0, 1, true
	}
	m := filterText.FindStringSubmatch(strings.TrimSpace(filter))
	if m == nil {
		return "", 0, 0, false
	}
	n, err1 := strconv.Atoi(m[2])
	k, err2 := strconv.Atoi(m[3])
	if err1 != nil || err2 != nil || n < 2 || k < 0 || k >= n {
		return "", 0, 0, false
	}
	return strings.Trim(m[1], `"`), k, n, true
}

// namePattern matches a derived name, base_s<k>of<n>.
var namePattern = regexp.MustCompile(`^(.+)_s(\d+)of(\d+)$`)

// BaseName returns the base name that name, a shard's slot or publication, was derived from:
// walbox for walbox_s0of3. A name derived from none is its own base, and ok is false.
func BaseName(name string) (base string, ok bool) {
	m := namePattern.FindStringSubmatch(name)
	if m == nil {
		return name, false
	}
	if _, _, ok := parseName(m[1], name); !ok {
		return name, false
	}
	return m[1], true
}

// parseName reads k and n from a name derived from base; ok is false for other names. The base
// name itself is shard 0 of 1.
func parseName(base, name string) (k, n int, ok bool) {
	if name == base {
		return 0, 1, true
	}
	m := namePattern.FindStringSubmatch(name)
	if m == nil || m[1] != base {
		return 0, 0, false
	}
	k, err1 := strconv.Atoi(m[2])
	n, err2 := strconv.Atoi(m[3])
	if err1 != nil || err2 != nil || n < 2 || k >= n || shardName(base, k, n) != name {
		return 0, 0, false
	}
	return k, n, true
}
