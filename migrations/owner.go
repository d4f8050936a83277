package migrations

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/wire"
)

// ErrRecordOwner is returned by Apply when walbox_slots belongs to a role it may not belong to
// (see ReadOwner).
var ErrRecordOwner = errors.New("walbox's record belongs to another role")

// ownerQuery reads the owner of walbox_slots in schema $1, and whether that owner is a superuser.
// It reads whether the owner is a member of the owner of one of the tables $2 (quoted names). And
// it reads whether the owner is a member of role $3.
const ownerQuery = `SELECT o.rolname::pg_catalog.text,
		o.rolsuper OR CASE WHEN $3::pg_catalog.text = '' THEN false ELSE pg_catalog.pg_has_role(o.oid, $3::pg_catalog.text, 'MEMBER') END
		OR EXISTS (SELECT 1 FROM pg_catalog.unnest($2::pg_catalog.text[]) t(name)
			JOIN pg_catalog.pg_class tc ON tc.oid = pg_catalog.to_regclass(t.name)::pg_catalog.oid
			WHERE pg_catalog.pg_has_role(o.oid, tc.relowner, 'MEMBER'))
	FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	JOIN pg_catalog.pg_roles o ON o.oid = c.relowner
	WHERE n.nspname = $1 AND c.relname = 'walbox_slots'`

// ReadOwner returns the owner of walbox_slots in schema ("" when there is none). It says whether
// that owner may own walbox's record. These roles may:
//   - a superuser;
//   - the owner of one of tables, or a member of it;
//   - the relay role, or a member of it ("" for none).
//
// Any other role created walbox_slots before walbox migrate did, or was given it. A role that may
// CREATE in the schema may do so. It can move the record past a gap, and doctor's other checks take
// it for the owner.
func ReadOwner(ctx context.Context, conn *pgx.Conn, schema string, tables []wire.Table, relayRole string) (string, bool, error) {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Quoted()
	}
	var owner string
	var trusted bool
	err := conn.QueryRow(ctx, ownerQuery, schema, names, relayRole).Scan(&owner, &trusted)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", true, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read the owner of walbox_slots: %w", err)
	}
	return owner, trusted, nil
}

// checkOwner refuses a walbox_slots in schema that belongs to a role ReadOwner does not trust.
func checkOwner(ctx context.Context, conn *pgx.Conn, table wire.Table, relayRole string) error {
	owner, trusted, err := ReadOwner(ctx, conn, table.Schema, []wire.Table{table}, relayRole)
	if err != nil || trusted {
		return err
	}
	return fmt.Errorf("%w: %s belongs to %s, which is no superuser and does not own %s: %s can move the record past a gap; "+
		"as a superuser, after checking its rows and the code of the record functions, give walbox_slots, walbox_relay_roles, "+
		"walbox_migrations and the record functions in schema %s to the owner of %s (ALTER ... OWNER TO); "+
		"if %s is the role walbox run logs in as, name it with --relay-role",
		ErrRecordOwner, table.Schema+".walbox_slots", owner, table, owner, table.Schema, table, owner)
}
