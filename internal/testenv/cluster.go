package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ClusterSize is the number of nodes of a Cluster: the smallest that keeps a quorum queue
// writable with a node down.
const ClusterSize = 3

// Cluster is a RabbitMQ cluster of ClusterSize nodes on this machine, each a process of its own
// with its own name, ports and directories, all with one Erlang cookie, joined with rabbitmqctl
// join_cluster. Any node can be killed, stopped and started again: it rejoins from its own mnesia
// directory.
type Cluster struct {
	nodes  []*Rabbit
	Formed time.Duration // how long starting and joining took
}

// SharedCluster returns the test binary's cluster, forming it on first use (about 30 s on two
// cores). Tests may kill, stop and start its nodes but must leave every node running when they
// end (StartAll), and should use UniqueName for their exchanges and queues. It needs TestMain to
// call Main, which stops it. An external broker (WALBOX_TEST_AMQP_URL) is a single node: the
// test skips.
func SharedCluster(tb TB) *Cluster {
	tb.Helper()
	requireSharedNodes(tb, "SharedCluster", "a RabbitMQ cluster")
	c, err := sharedCL.get(func() (*Cluster, error) { return startCluster("") })
	if err != nil {
		tb.Fatalf("testenv: shared rabbitmq cluster: %v", err)
	}
	return c
}

// StartCluster forms a cluster of the caller's own, like SharedCluster, and registers its
// shutdown with tb.Cleanup: for a program that needs a cluster outside a test binary (the
// benchmark) or a test that must own every node. RabbitVersion selects the nodes' version; the
// other options are ignored. With WALBOX_TEST_AMQP_URL set it skips.
func StartCluster(tb TB, opts ...RabbitOption) *Cluster {
	tb.Helper()
	if os.Getenv(EnvAMQPURL) != "" {
		tb.Skipf("needs a RabbitMQ cluster the harness starts itself; %s is set", EnvAMQPURL)
	}
	c, err := startCluster(rabbitRoot(tb, rabbitConfig{version: rabbitConfigOf(opts).version}))
	if err != nil {
		tb.Fatalf("testenv: rabbitmq cluster: %v", err)
	}
	tb.Cleanup(c.shutdown)
	return c
}

// StartStreamCluster forms a cluster of the caller's own, like StartCluster, whose nodes have the
// stream plugin, each with its stream listener (Rabbit.StreamURL). A stream declared on it has a
// replica on each other node.
func StartStreamCluster(tb TB) *Cluster {
	tb.Helper()
	if os.Getenv(EnvAMQPURL) != "" {
		tb.Skipf("needs a RabbitMQ cluster the harness starts itself; %s is set", EnvAMQPURL)
	}
	requireBinary(tb, RabbitBin("rabbitmq-server"), EnvAMQPURL)
	c, err := formCluster("", true)
	if err != nil {
		tb.Fatalf("testenv: rabbitmq stream cluster: %v", err)
	}
	tb.Cleanup(c.shutdown)
	return c
}

// NewCluster starts a cluster as StartCluster does, for a program rather than a test (the
// benchmark): it returns an error instead of failing a test, and Close kills the nodes and
// removes their directories. It ignores WALBOX_TEST_AMQP_URL.
func NewCluster() (*Cluster, error) {
	if _, err := exec.LookPath(RabbitBin("rabbitmq-server")); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	return startCluster("")
}

// Close kills the nodes of a cluster NewCluster started and removes their directories.
func (c *Cluster) Close() { c.shutdown() }

// startCluster boots the nodes side by side, in root unless it is "", then joins the second and
// later ones to the first.
func startCluster(root string) (*Cluster, error) { return formCluster(root, false) }

// formCluster is startCluster, with the stream plugin on every node when stream is set. Every
// node has the consistent-hash exchange plugin.
func formCluster(root string, stream bool) (*Cluster, error) {
	start := time.Now()
	c := &Cluster{nodes: make([]*Rabbit, ClusterSize)}
	cookie := UniqueName("cookie")
	errs := make([]error, ClusterSize)
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.nodes[i], errs[i] = startNode(&Rabbit{cookie: cookie, root: root, stream: stream, hash: true})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.shutdown()
		return nil, err
	}
	for _, n := range c.nodes[1:] {
		if err := n.join(c.nodes[0].node); err != nil {
			c.shutdown()
			return nil, err
		}
	}
	if err := c.waitMembers(); err != nil {
		c.shutdown()
		return nil, err
	}
	c.Formed = time.Since(start)
	return c, nil
}

// join makes r a member of the cluster of the node named first.
func (r *Rabbit) join(first string) error {
	for _, args := range [][]string{{"stop_app"}, {"join_cluster", first}, {"start_app"}} {
		if out, err := r.ctl(args...); err != nil {
			return fmt.Errorf("%s on %s: %w\n%s", strings.Join(args, " "), r.node, err, out)
		}
	}
	return nil
}

// waitMembers waits until the first node sees every node running.
func (c *Cluster) waitMembers() error {
	deadline := time.Now().Add(scaled(rabbitStartTimeout))
	var out string
	for time.Now().Before(deadline) {
		var err error
		out, err = c.nodes[0].ctl("eval", "length(rabbit_nodes:all_running()).")
		if err == nil && strings.TrimSpace(out) == fmt.Sprint(len(c.nodes)) {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("cluster did not form: running nodes %q", strings.TrimSpace(out))
}

// Node returns node i, 0 to ClusterSize-1.
func (c *Cluster) Node(i int) *Rabbit { return c.nodes[i] }

// Nodes returns every node, in the order of URLs.
func (c *Cluster) Nodes() []*Rabbit { return append([]*Rabbit(nil), c.nodes...) }

// URLs returns the guest URL of every node.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = n.URL()
	}
	return urls
}

// NodeAt returns the index of the node listening on port, or -1.
func (c *Cluster) NodeAt(port int) int {
	for i, n := range c.nodes {
		if n.port == port {
			return i
		}
	}
	return -1
}

// StartAll starts every node that is down and waits until the cluster has all of them running
// again; tests call it before they end, so the next test finds the cluster whole.
func (c *Cluster) StartAll(tb TB) {
	tb.Helper()
	for _, n := range c.nodes {
		if n.PID() == 0 {
			n.Start(tb)
		}
	}
	if err := c.waitMembers(); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
}

func (c *Cluster) shutdown() {
	for _, n := range c.nodes {
		if n != nil {
			n.shutdown()
		}
	}
}

// HoldBackReplica makes one replica of the stream named name lag, until resume: the leader's
// node stops feeding it new chunks (it suspends its osiris replica readers for that node). The
// replica stays up, and a reader it serves sees the stream as it was. The leader and the other
// replica still make a quorum, so publishing goes on.
func (c *Cluster) HoldBackReplica(tb TB, name string) (resume func()) {
	tb.Helper()
	out := c.nodes[0].Ctl(tb, "eval", fmt.Sprintf(`{ok, Q} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"/">>, queue, <<"%s">>)), `+
		`#{leader_node := L, replica_nodes := [R | _]} = amqqueue:get_type_state(Q), {L, R}.`, name))
	names := regexp.MustCompile(`'([^']+)'`).FindAllStringSubmatch(out, -1)
	if len(names) != 2 {
		tb.Fatalf("testenv: members of stream %s: %s", name, out)
	}
	var leader *Rabbit
	for _, n := range c.nodes {
		if n.node == names[0][1] {
			leader = n
		}
	}
	if leader == nil {
		tb.Fatalf("testenv: no node named %s", names[0][1])
	}
	feeders := func(op string) string {
		return fmt.Sprintf(`[sys:%s(P) || P <- erlang:processes(), {dictionary, D} <- [erlang:process_info(P, dictionary)], `+
			`lists:member({'$initial_call', {osiris_replica_reader, init, 1}}, D), `+
			`lists:any(fun(E) -> is_pid(E) andalso node(E) =:= '%s' end, tuple_to_list(sys:get_state(P)))].`, op, names[1][1])
	}
	// A replica reader may be between two runs (a replica reconnecting): look again for a while.
	for try := 1; ; try++ {
		out := leader.Ctl(tb, "eval", feeders("suspend"))
		if strings.Contains(out, "ok") {
			break
		}
		if try == 20 {
			tb.Fatalf("testenv: no replica reader of %s feeds %s: %s", name, names[1][1], out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return func() { leader.Ctl(tb, "eval", feeders("resume")) }
}

// StreamMember is one member of a stream, as the cluster reports it: its node, its role (writer
// or replica), and the first and last offsets of its log.
type StreamMember struct {
	Node, Role  string
	First, Last int64
}

var streamMemberRE = regexp.MustCompile(`\{role,(\w+)\},\s*\{node,'([^']+)'\},\s*\{offset,(-?\d+)\},` +
	`\s*\{committed_offset,-?\d+\},\s*\{first_offset,(-?\d+)\}`)

// streamStatus returns the members of stream name that report their log.
func (c *Cluster) streamStatus(name string) ([]StreamMember, string, error) {
	out, err := c.nodes[0].ctl("eval", fmt.Sprintf(`rabbit_stream_queue:status(<<"/">>, <<"%s">>).`, name))
	if err != nil {
		return nil, out, err
	}
	return parseStreamStatus(out), out, nil
}

// parseStreamStatus reads the members of rabbit_stream_queue:status's answer.
func parseStreamStatus(out string) []StreamMember {
	var members []StreamMember
	for _, m := range streamMemberRE.FindAllStringSubmatch(out, -1) {
		last, _ := strconv.ParseInt(m[3], 10, 64)
		first, _ := strconv.ParseInt(m[4], 10, 64)
		members = append(members, StreamMember{Node: m[2], Role: m[1], First: first, Last: last})
	}
	return members
}

// WaitStreamReplicated waits until every node has stream name's log up to the writer's last
// offset, and returns the members. A replica that has not joined yet, or lags, is waited for.
func (c *Cluster) WaitStreamReplicated(tb TB, name string) []StreamMember {
	tb.Helper()
	deadline := time.Now().Add(scaled(rabbitStartTimeout))
	for {
		members, out, err := c.streamStatus(name)
		if err == nil && replicated(members, len(c.nodes)) {
			return members
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testenv: stream %s not on every node after %v: %v\n%s", name, scaled(rabbitStartTimeout), err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// replicated reports whether n members report a log and all end at the writer's last offset.
func replicated(members []StreamMember, n int) bool {
	if len(members) != n {
		return false
	}
	for _, m := range members {
		if m.Last != members[0].Last {
			return false
		}
	}
	return true
}
