// Package faults holds walbox's fault-injection tests: the walbox binary as a subprocess, against
// real PostgreSQL servers and RabbitMQ nodes that the tests start, kill, stop, partition and
// alarm, with a workload writer and a verifier from test/checker counting what was lost,
// invented, duplicated and reordered. docs/reliability.md lists the faults, what walbox does
// about each, and the figures of the last run.
//
// go test ./faults/ (in the test module) runs the CI subset; -soak (or WALBOX_SOAK=1) runs the long
// variants, and WALBOX_SOAK_ROUNDS sets the rounds of the relay-kill test. -short skips
// everything here.
package faults
