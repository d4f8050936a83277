package bench

import (
	"fmt"

	"github.com/walbox/walbox/internal/testenv"
)

// ClusterScenarios returns the scenarios of a cluster run: a drain of single-row transactions and
// the steady rates, each into a quorum queue, for the ceiling with one and three publishers and
// walbox with one and three lanes. Run them on ClusterServers: every contender then gets every
// node's URL, and the ratios are to the one-publisher ceiling.
func ClusterScenarios(z Sizes) []Scenario {
	const small = 300
	all := ClusterContenders
	ss := []Scenario{{Name: "cluster drain, 1-row tx, quorum", Kind: Drain, Rows: z.Rows, TxSize: 1, Payload: small,
		Queue: Quorum, Contenders: all}}
	for _, r := range z.Rates {
		ss = append(ss, Scenario{Name: fmt.Sprintf("cluster steady %d/s, quorum", r), Kind: Steady, Rate: r,
			Duration: z.Steady, Payload: small, Queue: Quorum, Contenders: all})
	}
	return ss
}

// ClusterServersOf returns the Servers of a PostgreSQL server and a cluster the test harness
// started: the benchmark declares and consumes on the first node.
func ClusterServersOf(pg *testenv.Postgres, c *testenv.Cluster) Servers {
	first := c.Node(0)
	srv := Servers{DatabaseURL: pg.URL(), AMQPURL: first.URL(), PostgresPID: pg.PID(), BrokerPID: first.PID(),
		NodeURLs: c.URLs()}
	for _, n := range c.Nodes() {
		srv.NodePIDs = append(srv.NodePIDs, n.PID())
	}
	return srv
}

// StartClusterServers starts a throwaway PostgreSQL like StartServers, and a RabbitMQ cluster of
// testenv.ClusterSize nodes on this machine. stop kills them all and removes their directories;
// it must be called, also after an error.
func StartClusterServers() (srv Servers, stop func(), err error) {
	return startServers("rabbitmq cluster", func(pg *testenv.Postgres) (Servers, func(), error) {
		c, err := testenv.NewCluster()
		if err != nil {
			return Servers{}, func() {}, err
		}
		return ClusterServersOf(pg, c), c.Close, nil
	})
}
