#!/bin/sh
# Installs the servers the integration tests start (internal/testenv) on
# Debian bookworm, if missing. Idempotent; run as root.
# The system services the packages start are harmless: the tests run nodes
# of their own on free ports and never use the system ones.
set -eu

missing=""
[ -x /usr/lib/postgresql/15/bin/postgres ] || missing="$missing postgresql-15"
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || missing="$missing rabbitmq-server"
command -v docker-compose >/dev/null 2>&1 || missing="$missing docker-compose"

if [ -z "$missing" ]; then
	echo "install-deps: nothing to do"
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086 # word splitting of the package list is intended
apt-get install -y -qq --no-install-recommends $missing
