package testenv_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/internal/testenv"
)

// The nodes form one cluster: a quorum queue declared on one node takes confirmed publishes on
// another, keeps them through a kill -9 of a third, and the killed node rejoins.
func TestClusterKeepsAQuorumQueueThroughAKill(t *testing.T) {
	if testenv.Short() {
		t.Skip("starts a three-node RabbitMQ cluster")
	}
	c := testenv.SharedCluster(t)
	t.Logf("cluster of %d formed in %v", len(c.Nodes()), c.Formed.Round(time.Millisecond))
	defer c.StartAll(t)
	queue := testenv.UniqueName("qq")
	ch := channel(t, c.URLs()[0])
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	confirmedPublish(t, c.URLs()[1], queue)
	leader := leaderOf(t, c, queue)
	other := (leader + 1) % len(c.Nodes())
	c.Node(leader).Kill(t)
	confirmedPublish(t, c.URLs()[other], queue)
	c.Node(leader).Start(t)
	c.StartAll(t)
	ch = channel(t, c.URLs()[0])
	var q amqp.Queue
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if q, err = ch.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err == nil && q.Messages == 2 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || q.Messages != 2 {
		t.Fatalf("queue on the restarted node: %+v, %v; want 2 messages", q, err)
	}
}

// confirmedPublish publishes one persistent message to queue through the node at url until the
// broker acks it: while a quorum queue elects a new leader, the broker nacks (and nothing is
// kept), so it tries again, on a new channel each time, for up to 30 s.
func confirmedPublish(t *testing.T, url, queue string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	for nacks := 0; ; nacks++ {
		ch := channel(t, url)
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		ok, err := dc.WaitContext(ctx)
		if ok {
			t.Logf("publish through %s acked after %d nacks, %v", url, nacks, time.Since(start).Round(time.Millisecond))
			return
		}
		if err != nil {
			t.Fatalf("publish through %s: %v after %d nacks", url, err, nacks)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// leaderOf returns the index of the node leading the quorum queue.
func leaderOf(t *testing.T, c *testenv.Cluster, queue string) int {
	t.Helper()
	out := c.Node(0).Ctl(t, "list_queues", "--quiet", "--no-table-headers", "name", "leader")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == queue {
			for i, n := range c.Nodes() {
				if n.Node() == f[1] {
					return i
				}
			}
		}
	}
	t.Fatalf("no leader for %s in:\n%s", queue, out)
	return -1
}
