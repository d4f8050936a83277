#!/bin/sh
# Initialises $PGDATA on the first start (superuser POSTGRES_USER with POSTGRES_PASSWORD, database
# POSTGRES_DB, password logins from any address), then runs the command as the postgres user.
set -eu
case "$1" in -*) set -- postgres "$@" ;; esac
if [ "$1" != postgres ]; then
	exec "$@"
fi
if [ "$(id -u)" = 0 ]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chown postgres:postgres "$PGDATA" /var/run/postgresql
	chmod 700 "$PGDATA"
	exec runuser -u postgres -- "$0" "$@"
fi
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
	: "${POSTGRES_PASSWORD:?must be set}"
	pwfile=$(mktemp)
	printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
	initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 >/dev/null
	rm -f "$pwfile"
	echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
	echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
	if [ "$db" != postgres ]; then
		# Single-user mode: no server that a health check could see before it is ready.
		echo "CREATE DATABASE \"$db\"" | postgres --single -D "$PGDATA" postgres >/dev/null
	fi
fi
exec "$@"
