package streampub_test

import (
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

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
	t.Cleanup(c.HoldBackReplica(t, cfg.Stream))
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
