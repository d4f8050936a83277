// Package e2e holds walbox's end-to-end tests of what a user of the walbox binary sees (commands,
// settings, exit codes, messages, endpoints): the binary as a subprocess, against a real
// PostgreSQL and a real RabbitMQ node started by internal/testenv. Faults belong to
// test/faults; the table below says which package owns which scenario.
//
// # Which package owns which scenario
//
// Every end-to-end scenario is tested in one package; a test that repeats
// another package's scenario must assert something that one does not.
//
// test/faults owns faults: the relay killed, the broker lost,
// partitions, PostgreSQL restarts and crashes, slots lost and recovered,
// schema and data that stop the relay, and the figures measured under them.
//
//   - relay killed: TestRelayKilledAtRandomMoments (random moments, loss,
//     phantoms and order), TestDuplicatesAfterKillWhileDraining (mid-stream,
//     duplicates bounded), TestHugeTransactionKilledHalfway,
//     TestTablelessRelayKilled, TestShardsKilledAtRandomMoments,
//     TestRelayWithCanariesKilledAtRandomMoments
//   - kill points (a walbox built with the tag killpoints killed at a named boundary):
//     TestRelayKilledAtEveryPoint, TestStandbyKilledAtEveryPoint, TestRecoverKilledAtEveryPoint,
//     TestPruneKilledAtEveryPoint, TestReshardKilledAtEveryPoint,
//     TestStreamReshardKilledAtEveryPoint, TestRecoverIntoStreamKilledAtEveryPoint,
//     TestRelayModesKilledAtEveryPoint (stream, shards, lanes), TestKillPointsSoak (make soak),
//     TestEveryKillPointIsCovered, TestSoakSummaryTable
//   - the seam matrix (docs/seams.md): TestSeams, TestCoveringArrayCoversEveryPair,
//     TestEveryModeHasACell, TestSeamsDocListsTheCells
//   - broker lost: TestBrokerFaults (memory alarm, silent partition, long
//     outage, graceful restart, node killed), TestClusterFaults,
//     TestNackedMessagesAreRetried, TestRecoverUsesTheNextBrokerWhenTheFirstIsDown
//   - a cluster's park queue on a dead node: TestClusterFaultsOnRabbitMQ40,
//     TestARowToParkWaitsForItsQueue, TestAParkWaitGoesWithTheSlot
//   - PostgreSQL lost: TestPostgresFaults, TestPartitionDuringSessionSetup,
//     TestStandbyTakesOver, TestStandbyTakesOverWhileTheBrokerIsDown, TestPrimaryFailsOverToAStandby (PostgreSQL 17
//     failover slots: the primary killed, the standby promoted, one walbox
//     given both hosts)
//   - decoding on a standby: TestRelayOnAStandbyKilledAndRestarted,
//     TestStandbyPromotedUnderReplicationURL, TestPromotedStandbyRecordNotBehindSlot,
//     TestReplacedStandbySlotRefused, TestSlotOnAStandbyAdvancedBeforeItIsHeld,
//     TestRunRefusesTwoStandbysBehindOneURL (a read-only service over two standbys),
//     TestRunRefusesTwoPromotedStandbysBehindOneURL (a split brain behind --database-url),
//     TestStandbyDecodingSparesThePrimary (the primary's CPU per message),
//     TestRecoverStandbySlot
//   - slot lost or replaced: TestSlotDroppedUnderRelay, TestSlotInvalidated,
//     TestSlotReplacedWhileRetrying, TestSlotAdvancedBeforeItIsHeld, TestRecoverDroppedSlot,
//     TestRecoverReplacedSlot, TestRecoverInvalidatedSlot, TestRecoverRefusals,
//     TestRecoverShardSlot, TestRecoverSaysEmittedMessagesOfTheGapAreGone,
//     TestRecoverIntoStreamKilledAndRunAgain (into a stream, exactly once)
//   - recover's gap checks: TestRecoverRefusesAGapWhoseRowsWereDeleted,
//     TestRecoverRefusesAGapATruncateEmptied, TestRecoverRefusesAGapATableSwapTook,
//     TestRecoverRefusesAGapAfterTheStatisticsBeganAgain, TestRecoverRefusesAGapAcrossAPromotion,
//     TestRecoverAcceptedLossIsOneSlots, TestPruneKeepsRowsARecoveredSlotHasNotConfirmed
//   - recover into a stream: TestRecoverRefusesAStreamThatDoesNotExist,
//     TestRecoverIntoAStreamFromAStandby, TestRecoverIntoAStreamShardsShare,
//     TestRecoverIntoAStreamTwoClustersShare
//   - replay: TestReplayKilledHalfwayResumes (SIGKILLed halfway, resumed, the slot
//     unmoved, a second run refused), TestReplayFiltersBesideARunningRelay (each filter,
//     the relay's message, rows not yet due left to the schedule), TestReplayByCommitTime,
//     TestReplayMappedLegacyTable, TestReplayShardedTable, TestReplayRerunAfterAKillWhileTheSessionWaits,
//     TestReplayLeavesOutSubtransactionsOfATransactionRunningAtStart,
//     TestReplaySendsRowsOlderThanTwoBillionTransactions
//   - scheduled delivery: TestScheduledMessagesSurviveKills, TestScheduledDeliveryAsALeastPrivilegedRelay,
//     TestRecoverSchedulesRowsDueLater, TestScheduledMessagesAcrossAReshard,
//     TestScheduledRowSurvivesAFailoverBeforeItsRecordReachedTheStandby, TestScheduleBench (make soak:
//     100,000 over 10 minutes), TestScheduleBurstRate (make soak: many due at once)
//   - parked rows (walbox parked): TestParkedRowsListedReplayedDiscarded (list, show,
//     replay, discard, bad usage), TestParkedStreamListedReplayedDiscarded (the park stream),
//     TestParkedReplayKilledAtEveryPoint, TestParkedOnAQuorumQueueOfACluster,
//     TestParkedByALeastPrivilegedBrokerUser, TestParkedOfTwoDatabasesDoNotCross,
//     TestParkedRowsGoToTheirOwnExchangeAndKey, TestParkedStreamRowDueLaterWaitsForItsTime,
//     TestParkedOfTwoDatabasesOnOneExchange, TestParkedStreamOfTwoDatabases
//   - schema and data: TestSchemaChangeMidStream, TestTableSwapStops,
//     TestPublicationChangeStops, TestColumnDriftStops, TestBadRowsUnderLoad,
//     TestUndoneRenameStopNamesItsWayOut, TestRecreatedPublicationStopNamesItsWayOut
//     (a stop put right: what run, doctor, status and recover say, and the way out),
//     TestUnroutableRowStallsWithoutReplayingTheWindow,
//     TestRejectedMessagesAreParked, TestRowsTheBrokerRefusesForSizeAreParked,
//     TestTwoRowsRefusedForSizeInOneTransaction, TestManyRowsRefusedForSizeDoNotBackOff,
//     TestRecoverParksARowTheBrokerRefusesForSize,
//     TestEmittedMessageIsTheRowOnTheWire
//   - memory: TestLargeRowsPeakMemory, TestInterleavedLargeRowsArriveByteForByte
//   - shards: TestReshardUnderLoad, TestMismatchedShardsRefused, TestShardStopNamesItsWayOut
//   - reshard on a standby: TestReshardOnAStandby
//   - a RabbitMQ stream, exactly once: TestStreamExactlyOnceAcrossKills,
//     TestStreamExactlyOnceAcrossATimelineSwitch
//     (relay killed, broker killed, relay stopped, standby taking over)
//   - a stream at the seams: TestStreamTwoClustersWithTheDefaultSlotName,
//     TestStreamOnThreeNodesWithALaggingReplica, TestStreamRestoredDatabaseStopsTheRelay,
//     TestStreamRelayResumedAfterTakeoverWritesNothing,
//     TestStreamRelayResumedWritesNothingUnderTheWalsendersTimeout,
//     TestStreamPrefixChangedInsideATransactionLosesNoRow,
//     TestStreamReshardStoresNoRowBeforeTheCutTwice
//   - a restored data directory, in each mode: TestRestoredDatabase,
//     TestRestoredDatabaseUnderShardsIntoAStream,
//     TestPeekOnShardsSlotsWithEmittedMessagesCanariesAndARowDueLater,
//     TestStreamReadBackLongerThanTheWalsendersTimeout
//   - security: TestPasswordsNeverShown, TestLeastPrivilege
//   - code of another role: TestPlantedOverloadsNeverRun, TestBuiltinScanFindsWalboxCalls,
//     TestPlantedOperatorsNeverRunInTheLibraries, TestRecordPlantedInAMappedSchemaIsIgnored,
//     TestMigrationsTableOfAnotherRoleRunsNothingAsTheMigrator,
//     TestRecordTableTriggerRunsNothingAsRecover, TestRecordFunctionsRunNoTriggerOfTheTablesOwner,
//     TestRunAsASuperuserRefusesTheApplicationsRecordFunctions, TestRecordViewRunsNothingAsTheReader
//   - baselines: TestSteadyStreamWithoutFaults, TestConfirmLatencyAtALowRate
//   - newer servers: TestVersionMatrix runs the core cases above (relay, kill,
//     broker killed, emitted message, shards, least privilege with doctor,
//     recover) on PostgreSQL 17 and 18 with RabbitMQ 4.0
//
// test/e2e owns what a user of the walbox binary sees: commands, flags,
// settings, exit codes, messages and endpoints.
//
//   - the stream: TestTenThousandRowsInCommitOrder,
//     TestParkedAndUnroutableRowsDoNotStallTheStream, TestMappedLegacyTable,
//     TestHeadersArriveExactly
//   - shutdown: TestSIGTERMWithMessagesInFlight, TestSIGTERMWhileTheBrokerBlocks,
//     TestSIGTERMWhileTheBrokerBlocksLanes,
//     TestSIGTERMWhileALargeRowIsStuckInABlockedBroker, TestSIGTERMWhileTheBrokerIsFrozen,
//     TestSIGTERMWhileALargeRowIsStuckInAFrozenBroker
//   - failover slots: TestFailoverSlots, TestFailoverSlotOnRefusedBefore17
//   - standbys: TestStandbyAsDatabaseURLStopsAtOnce, TestDoctorChecksTheStandby
//   - start-up and settings: TestStartupErrors, TestTLSAndPasswordFiles,
//     TestOTLPEndpointRefusedWithoutTracing, TestChartEnvironment,
//     TestRunRefusesARoleThatCannotWriteItsRecord, TestRunRefusesARoleThatCannotRecordAStop,
//     TestStatusChecksSettingsFirst, TestStatusWithAStreamNodeThatDoesNotAnswer,
//     TestRunChecksListenFirst, TestBrokerURLAtAnotherServer, TestUnknownCommandIsOneLine,
//     TestConfigTablesMergeKeys, TestOperatorMessages, TestWrongDatabasePasswordSaysSo,
//     TestMigrateChecksWalLevelFirst, TestPositionIDsWithARowFilterRefused,
//     TestRunRefusesAnotherPrefixThanWalboxEmits, TestRunRefusesTwoServers,
//     TestRunRefusesARecordOfAnotherOwner, TestMigrateNamesTheRolesItCannotRestrict,
//     TestQueueConsumerProgramLinksNoStreamClient,
//     TestLargestRowUnderChartMemory
//   - commands: TestStatus, TestDoctorPassesOnAGoodSetup,
//     TestDoctorFailsOnWalLevelReplica, TestDoctorFindsMisconfiguration,
//     TestDoctorChecksEveryEndpoint, TestDoctorAndStatusKnowTheMessageMode,
//     TestDoctorFailsUntilMigrateRestrictsTheRecord,
//     TestPruneDeletesOnlyOldRowsInBatches, TestPruneWhileRelayRuns
//   - observability: TestMetricsHealthAndStatusFollowTheRelay,
//     TestStandbyReportsItself, TestSpansAreExportedInTheRowsTrace,
//     TestBlockedBrokerIsSeen, TestBlockedAcrossSessionsIsOneBlock
//   - files shipped with it: TestComposeFile,
//     TestDeployDashboardUsesOnlyWalboxMetrics, TestDeployAlertRules,
//     TestDeployPromtool, TestArchitectureLayoutListsEveryPackageInImportOrder
//   - one fault kept here: TestBrokerKilledMidStream stops the relay while
//     the broker is down and checks the broker's disk against the slot, which
//     no fault test does (theirs keep the relay running and count losses).
//
// examples/examplee2e owns the order and notification example: its HTTP
// API, the dual-write gap, and exactly-once notification, also across a
// relay crash and a broker crash, where it checks the notifications table
// (each order once, with its amount) rather than the relay's deliveries; and
// the demo, which finds the servers' programs itself; the payment that cancels its scheduled
// reminder (TestPaymentCancelsTheReminder); two notifiers sharing four partitions
// (TestTwoNotifiersShareFourPartitions).
//
//   - TestOrderAndOutboxRowCommitTogether,
//     TestBadOrderRequestsNameTheFieldAndWriteNothing,
//     TestDualWriteGapAndTheOutboxClosingIt,
//     TestOrdersNotifiedExactlyOnceAcrossRelayCrash,
//     TestBrokerCrashLosesNothing, TestDemoNotifiesEveryOrder,
//     TestDemoSaysInOneLineWhatIsMissing
//
// test/composetest runs docker-compose.yml itself (build tag compose),
// and test/bench measures; neither repeats a scenario above.
package e2e
