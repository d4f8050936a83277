package faults_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// The core cases on today's servers as well as the machine's own (PostgreSQL 15, RabbitMQ 3.10,
// which every other test runs on): PostgreSQL 17 and 18 with RabbitMQ 4.0, from Debian's trixie
// and forky packages in chroots the harness builds once and caches. Each combination has servers
// of its own; the cases reuse the fault tests' bodies with fewer rounds.
func TestVersionMatrix(t *testing.T) {
	heavy(t)
	t.Parallel() // first builds the chroots, which mostly waits on the network
	for _, c := range []struct {
		pg     int
		rabbit string
	}{{17, "4.0"}, {18, "4.0"}} {
		t.Run(fmt.Sprintf("postgres%d_rabbitmq%s", c.pg, c.rabbit), func(t *testing.T) {
			t.Parallel()
			pg := testenv.StartPostgres(t, testenv.PGVersion(c.pg))
			testenv.RequireOwn(t, pg)
			rabbit := testenv.StartRabbit(t, testenv.RabbitVersion(c.rabbit))
			testenv.RequireOwn(t, rabbit)
			checkVersions(t, pg, rabbit, c.pg, c.rabbit)
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)

			t.Run("relay", func(t *testing.T) { steadyStream(t, pg, rabbit, 10*time.Second, 3000) })
			t.Run("relay killed and replayed", func(t *testing.T) { relayKilledAtRandomMoments(t, pg, rabbit, seed, 5) })
			t.Run("broker killed", func(t *testing.T) { testBrokerRestart(t, pg, rabbit, func() { rabbit.Kill(t) }) })
			t.Run("emitted message", func(t *testing.T) { emittedMessageIsTheRow(t, pg, rabbit) })
			t.Run("shards with row filters", func(t *testing.T) { shardsKilledAtRandomMoments(t, pg, rabbit, 3, seed, 4) })
			t.Run("least privilege and doctor", func(t *testing.T) { leastPrivilege(t, pg, rabbit) })
			t.Run("recover", func(t *testing.T) { recoverDroppedSlot(t, pg, rabbit) })
		})
	}
}

// checkVersions fails the test unless the servers are the versions asked for.
func checkVersions(t *testing.T, pg *testenv.Postgres, rabbit *testenv.Rabbit, pgMajor int, rabbitVersion string) {
	t.Helper()
	var num int
	if err := pg.Conn(t, pg.URL()).QueryRow(t.Context(), "SELECT current_setting('server_version_num')::int").Scan(&num); err != nil {
		t.Fatal(err)
	}
	conn, _ := dialAMQP(t, rabbit.URL())
	version, _ := conn.Properties["version"].(string)
	conn.Close()
	if num/10000 != pgMajor || len(version) < len(rabbitVersion)+1 || version[:len(rabbitVersion)+1] != rabbitVersion+"." {
		t.Fatalf("servers are PostgreSQL %d and RabbitMQ %s, want %d and %s.x", num, version, pgMajor, rabbitVersion)
	}
	t.Logf("PostgreSQL %d, RabbitMQ %s", num, version)
}
