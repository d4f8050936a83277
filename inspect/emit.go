package inspect

import (
	"context"
	"fmt"

	"github.com/walbox/walbox/outbox"
)

// Emit says whether the tableless outbox is set up: the emit function (outbox.EmitFunction) in
// the outbox table's schema, and the prefix its messages carry.
type Emit struct {
	Prefix  string // the relayed prefix, "" for none
	Exists  bool   // the emit function exists
	Matches bool   // it emits with Prefix
	Version int    // server_version_num
}

// ReadEmit looks up the emit function of table's schema and whether it emits with prefix, the
// prefix the relay relays ("" for none).
func ReadEmit(ctx context.Context, q Querier, table outbox.Table, prefix string) (Emit, error) {
	e := Emit{Prefix: prefix}
	err := q.QueryRow(ctx, `
		SELECT current_setting('server_version_num')::int,
		       p.oid IS NOT NULL,
		       coalesce(position(format('pg_logical_emit_message(true, %L,', $3::text) IN p.prosrc) > 0, false)
		  FROM (SELECT 1) one
		  LEFT JOIN pg_proc p ON p.proname = $2
		   AND p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)`,
		table.Schema, outbox.EmitFunction, prefix).Scan(&e.Version, &e.Exists, &e.Matches)
	if err != nil {
		return e, fmt.Errorf("look up %s.%s: %w", table.Schema, outbox.EmitFunction, err)
	}
	return e, nil
}
