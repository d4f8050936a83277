// Package testenv starts throwaway PostgreSQL 15 and RabbitMQ servers as
// child processes for integration tests, and guarantees they are gone
// afterwards.
//
// # Servers
//
// StartPostgres runs initdb and a postmaster on a free port of 127.0.0.1
// with wal_level=logical, fsync=off, 20 replication slots and walsenders,
// its Unix socket and log file in its own directory. As root the server runs
// as the postgres user. StartRabbit runs a RabbitMQ node of its own
// (walbox-test-<pid>-<n>@localhost) with free AMQP and distribution ports,
// its own mnesia, log, config, cookie and an empty plugins file; the system
// node, its plugins and rabbitmq-env.conf are not used. Both return once the
// server accepts connections (bounded: 30 s and 60 s; the failure message
// carries the server's log tail), and both can be stopped, killed and
// started again on the same port and data directory. WALBOX_TEST_TIMEOUT_SCALE
// (a factor, e.g. 3) stretches these bounds on overloaded machines.
//
// SharedPostgres and SharedRabbit return one server per test binary, started
// on first use and stopped by Main; tests must not stop them and isolate
// themselves with NewDatabase and UniqueName instead.
//
// # Cleanup
//
// tb.Cleanup kills a server and removes its directory, whether the test
// passed or not. Every server runs in its own process group and gets SIGKILL
// from the kernel when the test binary dies (parent-death signal), so a
// panic, a test timeout or SIGKILL leaves no process behind; Main also kills
// them on SIGINT, SIGTERM and SIGHUP and removes directories left by test
// binaries that no longer run. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
//
// # External servers
//
// When WALBOX_TEST_DATABASE_URL (resp. WALBOX_TEST_AMQP_URL) is set, the
// Postgres (resp. Rabbit) constructors start nothing and return an object for
// that server; its External method reports true. Tests that stop, kill or
// reconfigure a server call RequireOwn first, which skips them in that mode.
//
// # Missing binaries
//
// Outside CI a missing server binary skips the test, naming the binary.
// With CI=true it fails the test, as does any server that does not start.
// WALBOX_TEST_PG_BIN and WALBOX_TEST_RABBITMQ_BIN override the binary
// directories (default /usr/lib/postgresql/15/bin and /usr/lib/rabbitmq/bin).
package testenv
