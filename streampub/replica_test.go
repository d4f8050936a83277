package streampub_test

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// feeders returns an expression for the leader's node that applies op (suspend or resume) to
// its replica readers feeding the node named replica: that replica then takes no new chunks, and
// a reader it serves sees the stream as it was.
func feeders(op, replica string) string {
	return fmt.Sprintf(`[sys:%s(P) || P <- erlang:processes(), {dictionary, D} <- [erlang:process_info(P, dictionary)], `+
		`lists:member({'$initial_call', {osiris_replica_reader, init, 1}}, D), `+
		`lists:any(fun(E) -> is_pid(E) andalso node(E) =:= '%s' end, tuple_to_list(sys:get_state(P)))].`, op, replica)
}

// On a three-node cluster the client reads the stream from a replica, at random. One replica is
// made to lag: it has the producer's first 100 messages, the leader and the other replica all
// 200. A session reads the anchor from the last message, never from what the lagging replica
// shows: a read that falls short of the broker's last id is read again, or fails the session.
// Taken as "no anchor", it would have stored the replay again.
func TestAnchorIsNotTakenFromALaggingReplica(t *testing.T) {
	c := testenv.StartStreamCluster(t)
	cfg := config(c.Node(0))
	pos, msgs := rows(0x7000000, 200)
	s := dial(t, cfg)
	publishAll(t, s, pos[:100], msgs[:100])
	time.Sleep(2 * time.Second) // every replica has them
	leader, lagging := members(t, c, cfg.Stream)
	t.Logf("suspended: %s", leader.Ctl(t, "eval", feeders("suspend", lagging)))
	t.Cleanup(func() { leader.Ctl(t, "eval", feeders("resume", lagging)) })
	publishAll(t, s, pos[100:], msgs[100:])
	_ = s.Close()

	found := 0
	for i := range 8 {
		d, err := dialBound(cfg, system)
		if err != nil {
			t.Logf("session %d: %v", i, err) // fell short on every read: no anchor is taken
			continue
		}
		id, anchor, ok := d.Anchor()
		_ = d.Close()
		if id != 200 || !ok || anchor != pos[199] {
			t.Errorf("session %d: anchor id %d, position %v (found %v); want 200, %v", i, id, anchor, ok, pos[199])
			continue
		}
		found++
	}
	if found == 0 {
		t.Error("no session found the anchor: the replica that keeps up was never read")
	}
}

// members returns the node of the stream's leader and the name of one of its replicas' nodes.
func members(t *testing.T, c *testenv.Cluster, streamName string) (*testenv.Rabbit, string) {
	t.Helper()
	out := c.Node(0).Ctl(t, "eval", fmt.Sprintf(`{ok, Q} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"/">>, queue, <<"%s">>)), `+
		`#{leader_node := L, replica_nodes := [R | _]} = amqqueue:get_type_state(Q), {L, R}.`, streamName))
	names := regexp.MustCompile(`'([^']+)'`).FindAllStringSubmatch(out, -1)
	if len(names) != 2 {
		t.Fatalf("members of %s: %s", streamName, out)
	}
	for _, n := range c.Nodes() {
		if n.Node() == names[0][1] {
			return n, names[1][1]
		}
	}
	t.Fatalf("no node named %s", names[0][1])
	return nil, ""
}
