package streampub_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

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
	c.WaitStreamReplicated(t, cfg.Stream) // every replica has them
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

// Held on a three-node cluster with one replica held back: the client reads from a replica at
// random. Held reads at least to the producer's last message, read again through another
// subscription when one stalls, so every Held finds all the rows the leader stored (or fails);
// none reports rows missing because it read the lagging replica's end. (Before, 3 of 8 found
// none: recover would have stored the rows the lagging replica lacked twice.)
func TestHeldIsNotTakenFromALaggingReplica(t *testing.T) {
	c := testenv.StartStreamCluster(t)
	cfg := config(c.Node(0))
	pos, msgs := rows(0x7000000, 200)
	s := dial(t, cfg)
	publishAll(t, s, pos[:100], msgs[:100])
	c.WaitStreamReplicated(t, cfg.Stream) // every replica has them
	t.Cleanup(c.HoldBackReplica(t, cfg.Stream))
	publishAll(t, s, pos[100:], msgs[100:])
	_ = s.Close()

	ask := map[string]bool{}
	for _, m := range msgs[100:] {
		ask[m.AMQPMessageID()] = true
	}
	complete := 0
	for i := range 8 {
		d, err := dialBound(cfg, system)
		if err != nil {
			t.Logf("session %d: %v", i, err)
			continue
		}
		held, err := d.Held(1, 0x7000000, ask)
		_ = d.Close()
		if err != nil {
			t.Logf("session %d: Held: %v", i, err) // a read that cannot complete fails
			continue
		}
		if len(held) != len(ask) {
			t.Errorf("session %d: Held found %d of the %d rows the leader stored", i, len(held), len(ask))
			continue
		}
		complete++
	}
	if complete == 0 {
		t.Error("no Held completed: the replica that keeps up was never read")
	}
}

// The continuation from the old name (walbox-<slot>) on a three-node cluster with one replica
// held back: the lagging replica has this system's first 100 messages under the old name, the
// leader and the other replica all 200. Every session continues from the 200th or fails; none
// takes the 100th for the old name's last message of this system, which stored the 100 after it
// again under the new name.
func TestLegacyAnchorIsNotTakenFromALaggingReplica(t *testing.T) {
	c := testenv.StartStreamCluster(t)
	cfg := config(c.Node(0))
	pos, msgs := rows(0x7000000, 200)
	legacy := make([]legacyRow, 200)
	for i := range legacy {
		legacy[i] = legacyRow{int64(i + 1), strconv.FormatUint(system, 10), pos[i], msgs[i]}
	}
	publishLegacy(t, c.Node(0).StreamURL(), cfg.Stream, cfg.Slot, legacy[:100])
	c.WaitStreamReplicated(t, cfg.Stream) // every replica has them
	t.Cleanup(c.HoldBackReplica(t, cfg.Stream))
	publishLegacy(t, c.Node(0).StreamURL(), cfg.Stream, cfg.Slot, legacy[100:])

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

// A stream whose retention removed its first offsets, on three nodes with one replica held back
// before the producer stored anything: the lagging replica shows none of the producer's
// messages back to its first offset, as if retention had removed them. Every session finds the
// anchor or fails; none takes "no anchor", which stored the slot's replay again.
func TestNoAnchorIsNotTakenFromALaggingReplicaOfATrimmedStream(t *testing.T) {
	c := testenv.StartStreamCluster(t)
	cfg := config(c.Node(0))
	env := declareTrimmed(t, c.Node(0).StreamURL(), cfg.Stream)
	filler, err := env.NewProducer(cfg.Stream, stream.NewProducerOptions())
	if err != nil {
		t.Fatal(err)
	}
	confirms := filler.NotifyPublishConfirmation()
	for range 10 {
		var batch []message.StreamMessage
		for range 100 {
			batch = append(batch, amqp.NewMessage([]byte(strings.Repeat("x", 200))))
		}
		if err := filler.BatchSend(batch); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(batch); {
			select {
			case cs := <-confirms:
				got += len(cs)
			case <-time.After(waitFor):
				t.Fatal("filler not confirmed")
			}
		}
		// A replica that joins once retention removed offset 0 never joins: wait for it.
		c.WaitStreamReplicated(t, cfg.Stream)
	}
	_ = filler.Close()
	trimmed(t, c, cfg.Stream) // every replica has them, and retention removed the first
	t.Cleanup(c.HoldBackReplica(t, cfg.Stream))
	pos, msgs := rows(0x7000000, 100)
	s := dial(t, cfg)
	publishAll(t, s, pos, msgs)
	_ = s.Close()

	found := 0
	for i := range 8 {
		d, err := dialBound(cfg, system)
		if err != nil {
			t.Logf("session %d: %v", i, err)
			continue
		}
		id, anchor, ok := d.Anchor()
		_ = d.Close()
		if id != 100 || !ok || anchor != pos[99] {
			t.Errorf("session %d: anchor id %d, position %v (found %v); want 100, %v", i, id, anchor, ok, pos[99])
			continue
		}
		found++
	}
	if found == 0 {
		t.Error("no session found the anchor: the replica that keeps up was never read")
	}
}

// trimmed waits until every replica of stream name has all its messages, and retention removed
// the first from each.
func trimmed(t *testing.T, c *testenv.Cluster, name string) {
	t.Helper()
	for deadline := time.Now().Add(waitFor); ; time.Sleep(200 * time.Millisecond) {
		members, done := c.WaitStreamReplicated(t, name), true
		for _, m := range members {
			done = done && m.First > 0
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("retention removed no offset of %s on some node after %v: %+v", name, waitFor, members)
		}
	}
}
