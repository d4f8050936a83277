package faults_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/internal/testenv"
)

// failoverBound is the generous bound on the time from losing the connected node to the first
// confirm through another: two shared cores, a race-built walbox and a quorum queue electing a
// new leader.
const failoverBound = 30 * time.Second

// quorumSinks makes walbox declare its park and alternate queues as quorum queues, as the
// default (auto) does with several URLs: the subtests other than the kill name it outright.
const quorumSinks = "WALBOX_QUEUE_TYPE=quorum"

// TestClusterFaults runs walbox against a three-node RabbitMQ cluster with a quorum queue, all
// nodes in --amqp-url, and takes nodes away from it while a writer commits: the node walbox is
// connected to is killed (with the default --queue-type, and again with classic park and
// alternate queues left on it), then cut off silently, then every node is restarted in turn.
// Nothing may be lost, and walbox never exits.
func TestClusterFaults(t *testing.T) {
	heavy(t)
	cluster := testenv.SharedCluster(t)
	pg := testenv.SharedPostgres(t)
	t.Logf("cluster of %d formed in %v", len(cluster.Nodes()), cluster.Formed.Round(time.Millisecond))

	t.Run("the connected node is killed", func(t *testing.T) {
		defer cluster.StartAll(t)
		testClusterKill(t, pg, cluster)
	})
	t.Run("the connected node is killed with classic park and alternate queues on it", func(t *testing.T) {
		defer cluster.StartAll(t)
		testClusterClassicSinks(t, pg, cluster)
	})
	t.Run("the connected node is cut off silently", func(t *testing.T) {
		defer cluster.StartAll(t)
		testClusterPartition(t, pg, cluster)
	})
	t.Run("rolling restart of every node", func(t *testing.T) {
		defer cluster.StartAll(t)
		testClusterRollingRestart(t, pg, cluster)
	})
	t.Run("three lanes, nodes killed in turn", func(t *testing.T) {
		defer cluster.StartAll(t)
		testClusterLanes(t, pg, cluster)
	})
}

// TestClusterFaultsOnRabbitMQ40 kills the connected node of a RabbitMQ 4.0 cluster, with the
// default --queue-type and again with classic park and alternate queues on that node. 4.0 has no
// mirrored classic queues, and there the declaration of a classic queue whose node is down gets
// no answer for over a minute (3.10 refuses it at once): confirms go on all the same, and a row
// to park waits, says so, and is parked once the node is back.
//
// `make test` runs the classic case only; the soak runs both. The default case repeats paths CI
// runs elsewhere. The classic case kills the connected 4.0 node under the same verdict and
// failover bound. TestClusterFaults declares the default quorum queues, on 3.10.
func TestClusterFaultsOnRabbitMQ40(t *testing.T) {
	heavy(t)
	cluster := testenv.StartCluster(t, testenv.RabbitVersion("4.0"))
	pg := testenv.SharedPostgres(t)
	t.Logf("RabbitMQ 4.0 cluster of %d formed in %v", len(cluster.Nodes()), cluster.Formed.Round(time.Millisecond))
	if soaking() {
		t.Run("the connected node is killed", func(t *testing.T) {
			defer cluster.StartAll(t)
			testClusterKill(t, pg, cluster)
		})
	}
	t.Run("the connected node is killed with classic park and alternate queues on it", func(t *testing.T) {
		defer cluster.StartAll(t)
		testClusterClassicSinks(t, pg, cluster)
	})
}

// clusterWorld is a world on the cluster with a quorum queue, declared and verified through
// the node at verify (which the test must not take away for long).
func clusterWorld(t *testing.T, pg *testenv.Postgres, cluster *testenv.Cluster, verify int) *world {
	t.Helper()
	return newWorldWith(t, pg, cluster.Node(verify), "#", amqp.Table{"x-queue-type": "quorum"})
}

// connectedTo waits until the relay reports a broker it is streaming to, and returns it.
func connectedTo(t *testing.T, r *relay) string {
	t.Helper()
	var broker string
	waitFor(t, time.Minute, "the relay to report its broker", func() bool {
		st, err := r.status()
		broker = st.Broker
		return err == nil && st.State == "streaming" && broker != ""
	})
	return broker
}

// failover waits until the relay has a confirm through a broker other than lost, having had
// confirmed messages before, and returns how long that took from since.
func failover(t *testing.T, r *relay, lost string, confirmedBefore uint64, since time.Time) (string, time.Duration) {
	t.Helper()
	var now string
	waitFor(t, 2*time.Minute, "a confirm through another node", func() bool {
		st, err := r.status()
		now = st.Broker
		return err == nil && now != "" && now != lost && st.Confirmed > confirmedBefore
	})
	took := time.Since(since)
	if took > failoverBound {
		t.Errorf("first confirm through another node %v after losing %s; want under %v", took, lost, failoverBound)
	}
	return now, took
}

func nodeOfHost(t *testing.T, cluster *testenv.Cluster, host string) int {
	t.Helper()
	for i, u := range cluster.URLs() {
		if hostOf(t, u) == host {
			return i
		}
	}
	t.Fatalf("%s is no node of the cluster (%v)", host, cluster.URLs())
	return -1
}

// The default --queue-type (auto) with several URLs declares quorum park and alternate queues:
// with classic ones, the node walbox is connected to took them down with it, every session on
// another node failed to declare them, and no confirm came until the node was back (34 s).
func testClusterKill(t *testing.T, pg *testenv.Postgres, cluster *testenv.Cluster) {
	w := clusterWorld(t, pg, cluster, 2)
	w.relayMQ = strings.Join(cluster.URLs(), ",")
	wr, v, r := brokerWorld(t, w, 31)
	_, ch := dialAMQP(t, cluster.URLs()[2])
	for _, q := range []string{w.exchange + ".parked", w.exchange + ".unroutable"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			t.Errorf("walbox's %s is not a quorum queue with the default --queue-type and three URLs: %v", q, err)
			_, ch = dialAMQP(t, cluster.URLs()[2])
		}
	}
	was := connectedTo(t, r)
	if want := hostOf(t, cluster.URLs()[0]); was != want {
		t.Errorf("walbox connected to %s first, want the first URL's node %s", was, want)
	}
	killed := nodeOfHost(t, cluster, was)
	confirmed := mustStatus(t, r).Confirmed
	start := time.Now()
	cluster.Node(killed).Kill(t)
	now, took := failover(t, r, was, confirmed, start)
	t.Logf("killed %s; first confirm through %s %v later", was, now, took.Round(time.Millisecond))
	w.progress(v, 300, 90*time.Second)
	cluster.Node(killed).Start(t)
	wr.stop()
	if r.Exited() {
		t.Fatalf("walbox exited:\n%s", testenv.Tail(r.Output(), 30))
	}
	w.verdict(wr.Writer, v, 2*time.Minute, 1, 1, fmt.Sprintf("failover_to_first_confirm=%v", took.Round(time.Millisecond)))
}

// declareClassicSinks leaves classic park and alternate queues of w on the node of url, bound to
// their exchanges, as walbox declared them by default before --queue-type auto.
func declareClassicSinks(t *testing.T, w *world, url string) {
	t.Helper()
	conn, ch := dialAMQP(t, url)
	defer conn.Close()
	for _, q := range []string{w.exchange + ".parked", w.exchange + ".unroutable"} {
		if err := ch.ExchangeDeclare(q, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q, "", q, false, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// A cluster that walbox ran on before --queue-type auto keeps its classic park and alternate
// queues on one node; walbox keeps them as they are. When that node, the one walbox is connected
// to, is killed, they cannot be declared from any other node: sessions go on without them, and
// confirms keep coming. A row to park then waits, logged and shown by walbox_park_waiting, and
// the slot does not pass it; once the node is back the row is parked and nothing is lost.
func testClusterClassicSinks(t *testing.T, pg *testenv.Postgres, cluster *testenv.Cluster) {
	w := clusterWorld(t, pg, cluster, 2)
	w.relayMQ = strings.Join(cluster.URLs(), ",")
	declareClassicSinks(t, w, cluster.URLs()[0])
	out, code := w.walbox(nil, "doctor")
	for _, want := range []string{"FAIL  queue " + w.exchange + ".parked is not a quorum queue",
		"FAIL  queue " + w.exchange + ".unroutable is not a quorum queue", "delete_queue " + w.exchange + ".parked --if-empty"} {
		if code != 1 || !strings.Contains(out, want) {
			t.Errorf("walbox doctor on a cluster with classic park and alternate queues exited %d, want 1 and %q:\n%s", code, want, out)
		}
	}
	wr, v, r := brokerWorld(t, w, 35)
	was := connectedTo(t, r)
	if want := hostOf(t, cluster.URLs()[0]); was != want {
		t.Fatalf("walbox connected to %s first, want the first URL's node %s, where the classic queues are", was, want)
	}
	if !strings.Contains(r.Output(), "is not a quorum queue") {
		t.Errorf("walbox did not warn of its classic park queue on a cluster:\n%s", testenv.Tail(r.Output(), 20))
	}
	confirmed := mustStatus(t, r).Confirmed
	start := time.Now()
	cluster.Node(0).Kill(t)
	now, took := failover(t, r, was, confirmed, start)
	t.Logf("killed %s with the classic queues; first confirm through %s %v later", was, now, took.Round(time.Millisecond))
	w.progress(v, 300, 90*time.Second)

	// A row that can only be parked, while its queue is on the dead node.
	bad := uuid.NewString()
	if _, err := w.conn.Exec(context.Background(), `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ($1, 'bad', 'bad', '', '{}')`, bad); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "walbox to say a row waits to be parked", func() bool {
		return strings.Contains(r.Output(), "a row waits to be parked") && r.gauge("walbox_park_waiting") == 1 &&
			strings.Contains(r.readyz(), "a row waits to be parked in queue "+w.exchange+".parked")
	})
	if st := mustStatus(t, r); st.Parked != 0 {
		t.Errorf("walbox counts %d rows parked while the park queue's node is down", st.Parked)
	}
	cluster.Node(0).Start(t)
	cluster.StartAll(t)
	waitFor(t, 2*time.Minute, "the waiting row parked", func() bool {
		st, err := r.status()
		return err == nil && st.Parked == 1 && r.gauge("walbox_park_waiting") == 0
	})
	w.progress(v, 300, 90*time.Second)
	wr.stop()
	if r.Exited() {
		t.Fatalf("walbox exited:\n%s", testenv.Tail(r.Output(), 30))
	}
	w.verdict(wr.Writer, v, 2*time.Minute, 1, 1, fmt.Sprintf("failover_to_first_confirm=%v", took.Round(time.Millisecond)))
	conn, ch := dialAMQP(t, cluster.URLs()[2])
	defer conn.Close()
	d, ok, err := ch.Get(w.exchange+".parked", true)
	if err != nil || !ok || d.MessageId != bad {
		t.Errorf("park queue: got %q (found %t, %v), want the bad row %s", d.MessageId, ok, err, bad)
	}
}

// readyz returns the relay's /readyz body, "" when it cannot be read.
func (r *relay) readyz() string {
	resp, err := http.Get("http://" + r.addr + "/readyz")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// gauge reads the unlabelled gauge name from the relay's /metrics; -1 when it cannot be read.
func (r *relay) gauge(name string) float64 {
	resp, err := http.Get("http://" + r.addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// Each node behind a fault proxy; the proxy of the connected node stops forwarding without a
// word. AMQP heartbeats (2 s) find the silence; walbox moves on to the next node.
func testClusterPartition(t *testing.T, pg *testenv.Postgres, cluster *testenv.Cluster) {
	w := clusterWorld(t, pg, cluster, 2)
	proxies := make(map[string]*faultProxy)
	var urls []string
	for _, u := range cluster.URLs() {
		p := newProxy(t, hostOf(t, u))
		proxies[p.addr] = p
		urls = append(urls, withHost(t, u, p.addr)+"?heartbeat=2")
	}
	w.relayMQ = strings.Join(urls, ",")
	wr, v, r := brokerWorld(t, w, 32, quorumSinks)
	was := connectedTo(t, r)
	p, ok := proxies[was]
	if !ok {
		t.Fatalf("walbox reports broker %s, which is none of the proxies", was)
	}
	confirmed := mustStatus(t, r).Confirmed
	start := time.Now()
	p.partition()
	now, took := failover(t, r, was, confirmed, start)
	t.Logf("cut off %s; first confirm through %s %v later", was, now, took.Round(time.Millisecond))
	w.progress(v, 300, 90*time.Second)
	p.heal()
	wr.stop()
	w.verdict(wr.Writer, v, 2*time.Minute, 1, 1, fmt.Sprintf("partition_to_first_confirm=%v", took.Round(time.Millisecond)))
}

// Every node is stopped and started again in turn, as in an upgrade, while rows are written.
func testClusterRollingRestart(t *testing.T, pg *testenv.Postgres, cluster *testenv.Cluster) {
	w := clusterWorld(t, pg, cluster, 2)
	w.relayMQ = strings.Join(cluster.URLs(), ",")
	wr, v, r := brokerWorld(t, w, 33, quorumSinks)
	var brokers []string
	for i, n := range cluster.Nodes() {
		start := time.Now()
		n.Stop(t)
		n.Start(t)
		cluster.StartAll(t) // waits until the node runs in the cluster again
		w.progress(v, 200, 90*time.Second)
		brokers = append(brokers, mustStatus(t, r).Broker)
		t.Logf("node %d restarted in %v; walbox on %s", i, time.Since(start).Round(time.Millisecond), brokers[i])
		if r.Exited() {
			t.Fatalf("walbox exited during the restart of node %d:\n%s", i, testenv.Tail(r.Output(), 30))
		}
	}
	wr.stop()
	w.verdict(wr.Writer, v, 3*time.Minute, len(cluster.Nodes()), len(cluster.Nodes()),
		"brokers_after_each_restart="+strings.Join(brokers, ","))
	if st := mustStatus(t, r); st.Sessions < 2 {
		t.Errorf("walbox had %d sessions: the restarts never reached it", st.Sessions)
	}
}

// Three publishing lanes, one per node: a lane's node is killed (and started again) while rows
// are written. `make test` kills node 0 once; the soak kills nodes 0 and 1 in turn, 12 times in
// all. Each kill runs the same path. A lane lost ends every lane and walbox starts again from the slot, past which
// nothing unconfirmed on any lane went: nothing is lost, and no aggregate's messages arrive out of
// their commit order (the verdict checks both).
func testClusterLanes(t *testing.T, pg *testenv.Postgres, cluster *testenv.Cluster) {
	w := clusterWorld(t, pg, cluster, 2)
	w.relayMQ = strings.Join(cluster.URLs(), ",")
	wr, v, r := brokerWorld(t, w, 34, quorumSinks, "WALBOX_LANES=3")
	nodes := map[string]bool{}
	for _, m := range regexp.MustCompile(`msg="connected to broker" broker=(\S+)`).FindAllStringSubmatch(r.Output(), -1) {
		nodes[m[1]] = true
	}
	if len(nodes) != 3 {
		t.Fatalf("the lanes' sessions reached nodes %v; want one lane on each of the three\n%s", nodes, testenv.Tail(r.Output(), 20))
	}
	kills := soakInt("WALBOX_SOAK_CLUSTER_KILLS", 1, 12)
	for i := range kills {
		k := i % 2 // node 2 holds the verifier's queue
		sessions := mustStatus(t, r).Sessions
		start := time.Now()
		cluster.Node(k).Kill(t)
		waitFor(t, 2*time.Minute, "a new session after a lane's node was killed", func() bool {
			st, err := r.status()
			return err == nil && st.Sessions > sessions && st.State == "streaming"
		})
		t.Logf("killed node %d; streaming again %v later", k, time.Since(start).Round(time.Millisecond))
		w.progress(v, 300, 90*time.Second)
		cluster.Node(k).Start(t)
		cluster.StartAll(t)
	}
	wr.stop()
	if r.Exited() {
		t.Fatalf("walbox exited:\n%s", testenv.Tail(r.Output(), 30))
	}
	w.verdict(wr.Writer, v, 3*time.Minute, kills, kills, "lanes=3")
}
