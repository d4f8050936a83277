// Package e2e holds walbox's end-to-end tests of what a user of the walbox binary sees (commands,
// settings, exit codes, messages, endpoints): the binary as a subprocess, against a real
// PostgreSQL and a real RabbitMQ node started by internal/testenv. Faults belong to
// test/faults; internal/testenv's documentation says which package owns which scenario.
package e2e
