// Package testenv starts throwaway PostgreSQL and RabbitMQ servers and the
// programs under test as child processes for integration tests, and
// guarantees they are gone afterwards. It is the one harness of every
// end-to-end package, and the one starter of processes and servers for the
// demo (examples/cmd/demo) and the benchmark (test/bench) too. It lives in the
// product module, whose libraries' tests use it, and needs nothing walbox
// does not; the suites that use it live in the modules test/ and examples/.
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
// Ports come from the 10000 just below the kernel's ephemeral range. No
// outgoing connection takes one while its server is down. Each test binary
// locks the ports it picked (a file per port under /tmp/walbox-test-ports),
// so test binaries running side by side never pick the same one.
//
// # Versions
//
// By default servers are the machine's own PostgreSQL 15 and RabbitMQ 3.10
// (Debian bookworm). StartPostgres(t, PGVersion(17)) and PGVersion(18), and
// StartRabbit(t, RabbitVersion("4.0")), run newer ones from Debian trixie
// (PostgreSQL 17, RabbitMQ 4.0) and forky (PostgreSQL 18) in chroots.
// PGVersion(13) runs the older PostgreSQL 13 from Debian bullseye. Each
// chroot is built once per machine with debootstrap from the Debian mirror of
// the machine's apt sources (DebianMirror; WALBOX_DEBIAN_MIRROR overrides it)
// and cached under the user's cache directory, walbox/chroots
// (WALBOX_TEST_CHROOT_CACHE overrides it), named by a hash of what it is made
// of. A lock file lets concurrent test binaries build it once; a build goes
// to a temporary directory renamed when complete, and the next build removes
// what an interrupted one left. /proc is mounted in each chroot and stays
// mounted. The servers run in the chroot (as its postgres user, and as root
// for RabbitMQ, with the node's own cookie), their directories in its /tmp.
// Building needs root and debootstrap: outside CI a machine without them
// skips the test; under CI=true it, and any failed build, fails the test.
//
// StartStandby(t, primary, slot) makes a hot standby of a server it started
// (pg_basebackup -R -C -S slot, in the primary's chroot, with standby.signal
// and a primary_conninfo naming the slot and a database), on a port of its
// own; Promote promotes it. With sync_replication_slots and
// hot_standby_feedback on, a PostgreSQL 17 standby keeps failover slots.
//
// # Programs rather than tests
//
// The package does not import testing: functions that fail a test take a TB,
// the part of testing.TB they use, so the demo and the benchmark link no
// testing package through it. NewPostgres, NewRabbit and NewCluster start the
// machine's servers as the Start functions do, but return an error instead of
// failing a test, and Close stops them. WithBinDir and RabbitBinDir name the
// folder of the servers' programs. Spawn starts any child process, in a
// process group of its own with the parent-death signal; SpawnLogged sends its
// output to a log file, and Process.Stop stops it with SIGTERM, then SIGKILL
// to its group. Exec runs a command to completion that way and returns its
// output, killing it when its context ends; BuildIn builds a command of the
// repository into a folder, in the folder of its module.
//
// SharedPostgres and SharedRabbit return one server per test binary, started
// on first use and stopped by Main; tests must not stop them and isolate
// themselves with NewDatabase and UniqueName instead.
//
// # Programs under test
//
// Build builds a command of the repository with BuildIn (Build(t,
// "cmd/walbox", "-race"), Build(t, "examples/cmd/demo")), once per test
// binary and set of flags; a failed build fails every test
// that asks for it. Start runs a program such as `walbox run` and returns a
// Program: its stdout and stderr in a Log that can be read while it runs,
// WaitFor a readiness condition (failing early if the program exits), Stop
// (SIGTERM, then a deadline), Kill (SIGKILL to its process group, as in a
// crash), Wait and ExitCode. At cleanup the program is killed; the test
// fails if the race detector reported a data race in it, and a failed test
// logs the tail of its output. Run runs a command to completion with Exec
// under a deadline and returns its output and exit code.
//
// # Cleanup
//
// tb.Cleanup kills a server or program and removes its directory, whether
// the test passed or not. Every server and program runs in its own process group and gets SIGKILL
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
