// Package relayd is `walbox run` without its settings: it builds the relay, its sessions on the
// broker endpoints, its metrics, its HTTP endpoints (/metrics, /healthz, /readyz, /status) and the
// slot poller from plain configurations, and runs them under one owner that waits for all of them
// before Run returns. cmd/walbox and the benchmark's in-process relay both wire the relay here.
//
// The relay is the product, the rest serves it: when the relay stops, for an error or because
// the context ended, everything else stops too. A listen address that cannot be taken is logged
// loudly and the relay runs without its endpoints; a failing slot poll is counted, never fatal.
// Nothing here moves the slot: that is the relay's alone (package replication).
package relayd
