// Package dockerenv runs a Docker engine of its own for tests, builds the images a compose file
// needs without any registry, and drives and checks docker-compose projects on that engine.
//
// # The engine
//
// StartEngine starts dockerd with its socket, data root, exec root and pid file in a fresh
// directory under os.TempDir, the storage driver it picks there (overlay2, or vfs where overlay2
// does not work), and no iptables rules, default bridge or userland proxy: ports a compose file
// publishes are not bound on the host, so nothing collides with servers on the machine, and
// clients reach containers by their address on the project's network.
// Stop stops the daemon (and with it every container) and removes the directory; a later
// StartEngine removes what a test binary that died left behind. The system's daemon, if any, is
// never used.
//
// # The images
//
// Builder makes a Debian trixie base with debootstrap (minbase, from the Debian mirror of the
// machine's apt sources, or WALBOX_DEBIAN_MIRROR: testenv.DebianMirror) and imports it; on it,
// PostgreSQL 17, RabbitMQ 4.0 with the management plugin and a Go toolchain image are built from Debian packages with small entrypoints that honour the variables of the
// public images the compose file names (POSTGRES_USER, RABBITMQ_DEFAULT_USER, ...), and a runtime
// image with distroless's nonroot user. The walbox image is the project's Dockerfile, built with
// the Go and runtime images as its GO_IMAGE and RUNTIME_IMAGE. The base root file system and each
// of the other images are kept as files in a cache directory, named by a hash of everything they
// are made of, so a second run on the same machine builds only the walbox image; files no run
// used for two weeks are removed.
//
// # Projects
//
// A Project runs docker-compose (1.29) on the engine. Record collects its container events;
// CheckStartOrder checks from them that each service started once, after what it depends on was
// healthy or had completed; WaitReady waits until every service is healthy (or running, without
// a health check), naming those that are not with their state and last log lines.
package dockerenv
