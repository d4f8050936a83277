package testenv

import (
	"reflect"
	"strconv"
	"testing"
)

// A stream is replicated once every node reports its log, all to the writer's last offset. A
// replica that has not joined is missing from the status; one that lags ends earlier.
func TestStreamReplicatedWaitsForEveryNode(t *testing.T) {
	member := func(role, node string, last, first int) string {
		return "[{role," + role + "},\n  {node,'" + node + "'},\n  {offset," + strconv.Itoa(last) + "},\n" +
			"  {committed_offset,0},\n  {first_offset," + strconv.Itoa(first) + "},\n  {readers,0},\n  {segments,1}]"
	}
	all := "[" + member("writer", "a@localhost", 999, 896) + ",\n " + member("replica", "b@localhost", 999, 896) +
		",\n " + member("replica", "c@localhost", 999, 796) + "]"
	want := []StreamMember{{"a@localhost", "writer", 896, 999}, {"b@localhost", "replica", 896, 999},
		{"c@localhost", "replica", 796, 999}}
	if got := parseStreamStatus(all); !reflect.DeepEqual(got, want) {
		t.Fatalf("parsed %+v, want %+v", got, want)
	}
	if !replicated(want, 3) {
		t.Error("three members at the writer's last offset: not replicated")
	}
	if replicated(want[:2], 3) {
		t.Error("a replica that has not joined: replicated")
	}
	lagging := append([]StreamMember(nil), want...)
	lagging[2].Last = 899
	if replicated(lagging, 3) {
		t.Error("a replica that lags: replicated")
	}
}
