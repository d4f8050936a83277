// Package testenv starts throwaway PostgreSQL 15 and RabbitMQ servers and the
// programs under test as child processes for integration tests, and
// guarantees they are gone afterwards. It is the one harness of every
// end-to-end package.
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
// # Programs under test
//
// Build builds a command of this module (Build(t, "cmd/walbox", "-race"))
// once per test binary and set of flags; a failed build fails every test
// that asks for it. Start runs a program such as `walbox run` and returns a
// Program: its stdout and stderr in a Log that can be read while it runs,
// WaitFor a readiness condition (failing early if the program exits), Stop
// (SIGTERM, then a deadline), Kill (SIGKILL to its process group, as in a
// crash), Wait and ExitCode. At cleanup the program is killed; the test
// fails if the race detector reported a data race in it, and a failed test
// logs the tail of its output. Run runs a command to completion under a
// deadline and returns its output and exit code.
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
//
// # Which package owns which scenario
//
// Every end-to-end scenario is tested in one package; a test that repeats
// another package's scenario must assert something that one does not.
//
// internal/faults owns faults: the relay killed, the broker lost,
// partitions, PostgreSQL restarts and crashes, slots lost and recovered,
// schema and data that stop the relay, and the figures measured under them.
//
//   - relay killed: TestRelayKilledAtRandomMoments (random moments, loss,
//     phantoms and order), TestDuplicatesAfterKillWhileDraining (mid-stream,
//     duplicates bounded), TestHugeTransactionKilledHalfway,
//     TestTablelessRelayKilled, TestShardsKilledAtRandomMoments
//   - broker lost: TestBrokerFaults (memory alarm, silent partition, long
//     outage, graceful restart, node killed), TestClusterFaults,
//     TestNackedMessagesAreRetried, TestRecoverUsesTheNextBrokerWhenTheFirstIsDown
//   - PostgreSQL lost: TestPostgresFaults, TestPartitionDuringSessionSetup,
//     TestStandbyTakesOver
//   - slot lost or replaced: TestSlotDroppedUnderRelay, TestSlotInvalidated,
//     TestSlotReplacedWhileRetrying, TestRecoverDroppedSlot,
//     TestRecoverReplacedSlot, TestRecoverInvalidatedSlot, TestRecoverRefusals,
//     TestRecoverShardSlot, TestRecoverSaysEmittedMessagesOfTheGapAreGone
//   - schema and data: TestSchemaChangeMidStream, TestTableSwapStops,
//     TestPublicationChangeStops, TestColumnDriftStops, TestBadRowsUnderLoad,
//     TestUnroutableRowStallsWithoutReplayingTheWindow,
//     TestRejectedMessagesAreParked, TestEmittedMessageIsTheRowOnTheWire
//   - shards: TestReshardUnderLoad, TestMismatchedShardsRefused
//   - a RabbitMQ stream, exactly once: TestStreamExactlyOnceAcrossKills
//     (relay killed, broker killed, relay stopped, standby taking over)
//   - security: TestPasswordsNeverShown, TestLeastPrivilege
//   - baselines: TestSteadyStreamWithoutFaults, TestConfirmLatencyAtALowRate
//
// internal/e2e owns what a user of the walbox binary sees: commands, flags,
// settings, exit codes, messages and endpoints.
//
//   - the stream: TestTenThousandRowsInCommitOrder,
//     TestParkedAndUnroutableRowsDoNotStallTheStream, TestMappedLegacyTable
//   - shutdown: TestSIGTERMWithMessagesInFlight
//   - start-up and settings: TestStartupErrors, TestTLSAndPasswordFiles,
//     TestOTLPEndpointRefusedWithoutTracing, TestChartEnvironment
//   - commands: TestStatus, TestDoctorPassesOnAGoodSetup,
//     TestDoctorFailsOnWalLevelReplica, TestDoctorFindsMisconfiguration,
//     TestDoctorChecksEveryEndpoint, TestDoctorAndStatusKnowTheMessageMode,
//     TestPruneDeletesOnlyOldRowsInBatches, TestPruneWhileRelayRuns
//   - observability: TestMetricsHealthAndStatusFollowTheRelay,
//     TestStandbyReportsItself, TestSpansAreExportedInTheRowsTrace
//   - files shipped with it: TestComposeFile,
//     TestDeployDashboardUsesOnlyWalboxMetrics, TestDeployAlertRules,
//     TestDeployPromtool, TestReadmeLayoutListsEveryPackageInImportOrder
//   - one fault kept here: TestBrokerKilledMidStream stops the relay while
//     the broker is down and checks the broker's disk against the slot, which
//     no fault test does (theirs keep the relay running and count losses).
//
// internal/examplee2e owns the order and notification example: its HTTP
// API, the dual-write gap, and exactly-once notification, also across a
// relay crash and a broker crash, where it checks the notifications table
// (each order once, with its amount) rather than the relay's deliveries.
//
//   - TestOrderAndOutboxRowCommitTogether,
//     TestBadOrderRequestsNameTheFieldAndWriteNothing,
//     TestDualWriteGapAndTheOutboxClosingIt,
//     TestOrdersNotifiedExactlyOnceAcrossRelayCrash,
//     TestBrokerCrashLosesNothing, TestDemoNotifiesEveryOrder
//
// internal/composetest runs docker-compose.yml itself (build tag compose),
// and internal/bench measures; neither repeats a scenario above.
package testenv
