// Package composetest runs docker-compose.yml under a Docker engine of its own, with images built
// locally (no registry is needed), and checks what the compose file promises: start order and
// health, orders leading to notifications, the integration suite in the test profile, restarts
// and kills of the relay losing nothing, and the relay's health check when its slot is missing.
//
// The tests carry the build tag compose, so `go test ./...` leaves them out; run them with
// `make test-compose` (as root: the engine and debootstrap need it). Images are cached under
// the user's cache directory (dockerenv.EnvCache overrides it).
package composetest
