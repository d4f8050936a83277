#!/bin/sh
# Installs the servers the integration tests start (internal/testenv), the
# debootstrap that builds the Debian chroots of the version matrix's newer
# servers (PostgreSQL 17 and 18, RabbitMQ 4.0) and the compose tests' images,
# and the Docker engine and docker-compose that the compose tests use
# (test/composetest), on Debian bookworm, if missing. Idempotent; run as root.
# It starts none of the packages' services: the tests run nodes (and a Docker
# engine, with its containerd) of their own and never use the system ones, and a
# machine without an init system (a container) could not start them, which
# would fail the packages' configuration.
set -eu

missing=""
[ -x /usr/lib/postgresql/15/bin/postgres ] || missing="$missing postgresql-15"
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || missing="$missing rabbitmq-server"
command -v docker-compose >/dev/null 2>&1 || missing="$missing docker-compose"
[ -x /usr/sbin/dockerd ] || missing="$missing docker.io"
command -v debootstrap >/dev/null 2>&1 || missing="$missing debootstrap"

if [ -z "$missing" ]; then
	echo "install-deps: nothing to do"
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if [ ! -e /usr/sbin/policy-rc.d ]; then
	# invoke-rc.d and deb-systemd-invoke start no service while this denies it
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
	chmod 755 /usr/sbin/policy-rc.d
	trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get update -qq
# shellcheck disable=SC2086 # word splitting of the package list is intended
apt-get install -y -qq --no-install-recommends $missing
