// Package examplee2e tests the example order and notification services end to end against real
// PostgreSQL and RabbitMQ servers started by internal/testenv, with walbox running as a
// subprocess: the order and its outbox message commit together, the dual-write gap they close,
// exactly-once notification across a relay crash and a broker crash, and the demo command.
package examplee2e
