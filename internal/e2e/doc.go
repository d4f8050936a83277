// Package e2e holds walbox's end-to-end tests: the walbox binary as a subprocess, against a real
// PostgreSQL and a real RabbitMQ node started by the test harness.
package e2e
