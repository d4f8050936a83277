package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/replication"
)

// emitFacts say whether the tableless outbox is set up: the emit function in the outbox table's
// schema, and the prefix its messages carry.
type emitFacts struct {
	prefix  string // the relayed prefix, "" for none
	exists  bool   // the emit function exists
	matches bool   // it emits with prefix
	version int    // server_version_num
}

// relayedPrefix returns the prefix the relay asks for, "" for none.
func relayedPrefix(setting string) string {
	if setting == replication.NoMessages {
		return ""
	}
	return setting
}

// readEmit looks up the emit function of table's schema and the prefix it emits with.
func readEmit(ctx context.Context, conn *pgx.Conn, table outbox.Table, prefix string) (emitFacts, error) {
	f := emitFacts{prefix: prefix}
	err := conn.QueryRow(ctx, `
		SELECT current_setting('server_version_num')::int,
		       p.oid IS NOT NULL,
		       coalesce(position(format('pg_logical_emit_message(true, %L,', $3::text) IN p.prosrc) > 0, false)
		  FROM (SELECT 1) one
		  LEFT JOIN pg_proc p ON p.proname = $2
		   AND p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)`,
		table.Schema, outbox.EmitFunction, prefix).Scan(&f.version, &f.exists, &f.matches)
	if err != nil {
		return f, fmt.Errorf("look up %s.%s: %w", table.Schema, outbox.EmitFunction, err)
	}
	return f, nil
}

// emitCheck judges the tableless outbox: messages need PostgreSQL 14, and an emit function that
// writes another prefix than the relay reads would lose every message written through it.
func emitCheck(f emitFacts, table outbox.Table) check {
	const name = "emit_function"
	fn := table.Schema + "." + outbox.EmitFunction
	switch {
	case f.prefix == "" && f.exists:
		return warnCheck(name, "set --message-prefix to the prefix "+fn+" emits, or drop the function",
			"%s exists, but walbox relays no messages (--message-prefix none): whatever it writes is never published", fn)
	case f.prefix == "":
		return passCheck(name, "messages off (--message-prefix none): the table is the only outbox")
	case f.version < 140000:
		return failCheck(name, "upgrade PostgreSQL, or set --message-prefix none",
			"PostgreSQL %d cannot send logical decoding messages to walbox (14 or later can)", f.version/10000)
	case !f.exists:
		return warnCheck(name, "run `walbox migrate` to write messages without rows; rows work without it",
			"%s does not exist: messages with prefix %q are relayed, but nothing writes them", fn, f.prefix)
	case !f.matches:
		return failCheck(name, "run walbox with the --message-prefix the function was migrated with, or recreate it",
			"%s does not emit with prefix %q: walbox would never publish what it writes", fn, f.prefix)
	}
	return passCheck(name, "%s emits messages with prefix %q, which walbox relays like rows", fn, f.prefix)
}
