// Package relayd is `walbox run` without its settings. From plain configurations it builds:
//   - the relay;
//   - its sessions on the broker endpoints;
//   - its metrics;
//   - its HTTP endpoints (/metrics, /healthz, /readyz, /status);
//   - the slot poller.
//
// It runs them under one owner that waits for all of them before Run returns. Both cmd/walbox and
// the benchmark's in-process relay wire the relay here. See docs/architecture.md for the relay and
// the packages around it.
//
// The relay is the product, the rest serves it. When the relay stops, for an error or because the
// context ended, everything else stops too. A listen address that cannot be taken is logged loudly,
// and the relay runs without its endpoints. A failing slot poll is counted, never fatal. Nothing
// here moves the slot: that is the relay's alone (package replication).
package relayd
