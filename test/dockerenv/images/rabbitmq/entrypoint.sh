#!/bin/sh
# Writes the node's config (the default user from the environment; no loopback-only users, since
# clients connect over the network) and its Erlang cookie, then runs the command.
set -eu
{
	echo "loopback_users = none"
	[ -z "${RABBITMQ_DEFAULT_USER:-}" ] || echo "default_user = $RABBITMQ_DEFAULT_USER"
	[ -z "${RABBITMQ_DEFAULT_PASS:-}" ] || echo "default_pass = $RABBITMQ_DEFAULT_PASS"
} >"$RABBITMQ_CONFIG_FILE"
cookie="$HOME/.erlang.cookie"
if [ ! -s "$cookie" ]; then
	tr -dc A-Z </dev/urandom | head -c 32 >"$cookie"
	chmod 400 "$cookie"
fi
exec "$@"
