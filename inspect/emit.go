package inspect

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/walbox/walbox/outbox"
)

var (
	// ErrNoMessages means the server cannot send logical decoding messages (PostgreSQL 13 and
	// older), though walbox is to relay them.
	ErrNoMessages = errors.New("this PostgreSQL cannot send logical decoding messages")
	// ErrEmitPrefix means the emit function writes messages with another prefix than walbox
	// relays: walbox would skip every one of them.
	ErrEmitPrefix = errors.New("the emit function writes another message prefix than walbox relays")
)

// Emit says whether the tableless outbox is set up. It holds the emit function
// (outbox.EmitFunction) in the outbox table's schema. It holds the prefix that function's messages
// carry.
type Emit struct {
	Function string // the function's name, schema-qualified
	Prefix   string // the relayed prefix, "" for none
	Exists   bool   // the emit function exists
	Matches  bool   // it emits with Prefix
	// Emits is the prefix the function's body emits with, "" when none can be read from it.
	Emits   string
	Version int // server_version_num
}

// ReadEmit looks up the emit function of table's schema and whether it emits with prefix. That is
// the prefix the relay relays ("" for none).
func ReadEmit(ctx context.Context, q Querier, table outbox.Table, prefix string) (Emit, error) {
	e := Emit{Function: table.Schema + "." + outbox.EmitFunction, Prefix: prefix}
	var src string
	err := q.QueryRow(ctx, `
		SELECT pg_catalog.current_setting('server_version_num')::int,
		       p.oid IS NOT NULL,
		       coalesce(p.prosrc, '')
		  FROM (SELECT 1) one
		  LEFT JOIN pg_catalog.pg_proc p ON p.proname = $2
		   AND p.pronamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1)
		   AND p.proargtypes = $3::pg_catalog.oidvector`,
		table.Schema, outbox.EmitFunction, emitArgTypes).Scan(&e.Version, &e.Exists, &src)
	if err != nil {
		return e, fmt.Errorf("look up %s: %w", e.Function, err)
	}
	// The literal as walbox migrate writes it: quotes doubled, a backslash as it is. SQL's
	// format('%L') would write E'...' with backslashes doubled, and never match it.
	e.Matches = strings.Contains(src, "pg_logical_emit_message(true, '"+strings.ReplaceAll(prefix, "'", "''")+"',")
	if m := emitted.FindStringSubmatch(src); m != nil {
		e.Emits = strings.ReplaceAll(m[1], "''", "'")
	}
	return e, nil
}

// emitArgTypes is the signature walbox migrate gives the emit function, as type oids. It is (text,
// text, text, jsonb, jsonb, uuid, timestamptz). Another function of the name in the schema is an
// overload, and not the one to read. A wrapper of the application's is one, say.
const emitArgTypes = "25 25 25 3802 3802 2950 1184"

// emitted finds the prefix in the body walbox migrate writes: pg_logical_emit_message(true, 'p', ...).
var emitted = regexp.MustCompile(`pg_logical_emit_message\(true, '((?:[^']|'')*)',`)

// Err reports why the messages the emit function writes would never be relayed. The server may not
// send them (ErrNoMessages), or the function writes another prefix (ErrEmitPrefix). The command
// walbox doctor fails on it, and walbox run refuses to start.
func (e Emit) Err() error {
	switch {
	case e.Prefix == "":
		return nil
	case e.Version < 140000:
		return fmt.Errorf("%w: PostgreSQL %d sends no messages with prefix %q to walbox (14 or later does)",
			ErrNoMessages, e.Version/10000, e.Prefix)
	case e.Exists && !e.Matches && e.Emits != "":
		return fmt.Errorf("%w: %s emits with prefix %q, not %q: walbox would never publish what it writes",
			ErrEmitPrefix, e.Function, e.Emits, e.Prefix)
	case e.Exists && !e.Matches:
		return fmt.Errorf("%w: %s does not emit with prefix %q: walbox would never publish what it writes",
			ErrEmitPrefix, e.Function, e.Prefix)
	}
	return nil
}
