package doctor

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/registry"
)

// recordFunction is what the catalogs say of who may execute one record function.
type recordFunction struct {
	name   string
	public bool     // PUBLIC may execute it (a NULL proacl is PostgreSQL's default: it may)
	relay  bool     // the relay's role may execute it
	others []string // other roles granted EXECUTE: neither the owner, a member of it, a superuser nor the relay's role
}

// rightsCheck checks that only the owner and the relay's role (doctor's own unless --relay-role
// names it) may execute the functions that move walbox's record of its slots: whoever may can
// move the record past a gap, and a replaced slot then goes unnoticed.
func (d doctor) rightsCheck(ctx context.Context, conn *pgx.Conn, f pgFacts) Check {
	const name = "record_rights"
	relay := d.relayRole
	if relay == "" {
		relay = f.User
	}
	fix := "as the outbox table's owner: walbox migrate --relay-role " + shellWord(relay)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", relay).Scan(&exists); err != nil {
		return failCheck(name, "", "look up role %s: %v", relay, err)
	}
	if !exists {
		return failCheck(name, "set --relay-role to the role walbox run logs in as", "relay role %s does not exist", relay)
	}
	schemas := make([]string, len(d.mappings))
	for i, m := range d.mappings {
		schemas[i] = m.WithDefaults().Table.Schema
	}
	reg, err := registry.Find(ctx, conn, d.slot, schemas)
	if err != nil {
		return failCheck(name, "", "%v", err)
	}
	fns, err := readRecordFunctions(ctx, conn, reg.Schema(), relay)
	if err != nil {
		return failCheck(name, "", "%v", err)
	}
	if len(fns) == 0 {
		return warnCheck(name, "run `walbox migrate --relay-role "+shellWord(relay)+"` as the outbox table's owner",
			"the functions that record walbox's slots are not in schema %s", reg.Schema())
	}
	var public, others, denied []string
	for _, fn := range fns {
		if fn.public {
			public = append(public, fn.name)
		}
		if len(fn.others) > 0 {
			others = append(others, fmt.Sprintf("%s (%s)", fn.name, strings.Join(fn.others, ", ")))
		}
		if !fn.relay {
			denied = append(denied, fn.name)
		}
	}
	var problems []string
	if len(public) > 0 {
		problems = append(problems, "PUBLIC may execute "+strings.Join(public, ", ")+
			": any role that can log in can move walbox's record past a gap, and a replaced slot goes unnoticed")
	}
	if len(others) > 0 {
		problems = append(problems, "roles other than the owner and "+relay+" may execute "+strings.Join(others, ", "))
	}
	if len(denied) > 0 {
		problems = append(problems, "role "+relay+" may not execute "+strings.Join(denied, ", ")+": walbox run refuses to start")
	}
	if len(problems) > 0 {
		return failCheck(name, fix, "%s", strings.Join(problems, "; "))
	}
	return passCheck(name, "only the owner and %s may move walbox's record of its slots (%d functions in schema %s)",
		relay, len(fns), reg.Schema())
}

func readRecordFunctions(ctx context.Context, conn *pgx.Conn, schema, relay string) ([]recordFunction, error) {
	rows, err := conn.Query(ctx, `SELECT p.proname::text,
			p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'),
			has_function_privilege($3::text, p.oid, 'EXECUTE'),
			ARRAY(SELECT r.rolname::text FROM aclexplode(p.proacl) a JOIN pg_roles r ON r.oid = a.grantee
				WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner AND r.rolname <> $3
				  AND NOT r.rolsuper AND NOT pg_has_role(r.oid, p.proowner, 'MEMBER')
				ORDER BY 1)
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname = ANY($2)
		ORDER BY 1`, schema, migrations.RecordFunctions, relay)
	if err != nil {
		return nil, fmt.Errorf("read the rights on the record functions: %w", err)
	}
	defer rows.Close()
	var fns []recordFunction
	for rows.Next() {
		var fn recordFunction
		if err := rows.Scan(&fn.name, &fn.public, &fn.relay, &fn.others); err != nil {
			return nil, fmt.Errorf("read the rights on the record functions: %w", err)
		}
		fns = append(fns, fn)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the rights on the record functions: %w", err)
	}
	return fns, nil
}

// shellWord quotes s for a shell command line unless it needs no quoting.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// messageRightsCheck warns when any role may write a message walbox relays: PostgreSQL lets
// PUBLIC execute pg_logical_emit_message, so with messages relayed, every role that can log in
// can put an event on the broker under walbox's name, with or without walbox_emit.
func (d doctor) messageRightsCheck(ctx context.Context, conn *pgx.Conn) Check {
	const name = "message_rights"
	if d.prefix == "" {
		return passCheck(name, "messages off (--message-prefix none): no message reaches the broker through walbox")
	}
	var public bool
	var sigs []string
	err := conn.QueryRow(ctx, `SELECT coalesce(bool_or(p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a
			WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')), false),
			coalesce(array_agg(format('pg_logical_emit_message(%s)', pg_get_function_identity_arguments(p.oid)) ORDER BY p.oid), '{}')
		FROM pg_proc p WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace`).Scan(&public, &sigs)
	if err != nil {
		return failCheck(name, "", "read the rights on pg_logical_emit_message: %v", err)
	}
	if !public {
		return passCheck(name, "only roles granted pg_logical_emit_message may write messages with prefix %q", d.prefix)
	}
	fns := strings.Join(sigs, ", ")
	return warnCheck(name, "as a superuser: REVOKE EXECUTE ON FUNCTION "+fns+" FROM PUBLIC; then GRANT EXECUTE ON FUNCTION "+fns+
		" TO the roles that call walbox_emit. Or, if nothing calls walbox_emit, run walbox with --message-prefix none",
		"PUBLIC may execute pg_logical_emit_message: any role that can log in can write a message with prefix %q, "+
			"which walbox publishes like an outbox row", d.prefix)
}
