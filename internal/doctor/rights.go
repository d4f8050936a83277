package doctor

import (
	"context"
	"errors"
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
	grant  []string // roles but those that may grant EXECUTE to others (the relay's role included)
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
	var public, others, grant, denied []string
	for _, fn := range fns {
		if fn.public {
			public = append(public, fn.name)
		}
		if len(fn.others) > 0 {
			others = append(others, fmt.Sprintf("%s (%s)", fn.name, strings.Join(fn.others, ", ")))
		}
		if len(fn.grant) > 0 {
			grant = append(grant, fmt.Sprintf("%s (%s)", fn.name, strings.Join(fn.grant, ", ")))
		}
		if !fn.relay {
			denied = append(denied, fn.name)
		}
	}
	var problems []string
	owner, fnOwners, err := readRecordOwners(ctx, conn, reg.Schema())
	if err != nil {
		return failCheck(name, "", "%v", err)
	}
	if len(fnOwners) > 0 {
		problems = append(problems, fmt.Sprintf("walbox_slots belongs to %s, the record functions to %s: %s can move the record, "+
			"and a trigger of its own on walbox_slots runs with the functions' owner's rights", owner, strings.Join(fnOwners, ", "), owner))
		fix = fmt.Sprintf("as a superuser, after checking its rows: ALTER TABLE %s OWNER TO %s; then %s",
			pgx.Identifier{reg.Schema(), "walbox_slots"}.Sanitize(), pgx.Identifier{fnOwners[0]}.Sanitize(), fix)
	}
	writers, err := readRecordWriters(ctx, conn, reg.Schema())
	if err != nil {
		return failCheck(name, "", "%v", err)
	}
	if len(writers) > 0 {
		problems = append(problems, "roles other than the owner may write walbox_slots ("+strings.Join(writers, ", ")+
			"): they can move or delete walbox's record past a gap")
	}
	if len(public) > 0 {
		problems = append(problems, "PUBLIC may execute "+strings.Join(public, ", ")+
			": any role that can log in can move walbox's record past a gap, and a replaced slot goes unnoticed")
	}
	if len(others) > 0 {
		problems = append(problems, "roles other than the owner and "+relay+" may execute "+strings.Join(others, ", "))
	}
	if len(grant) > 0 {
		problems = append(problems, "roles may grant EXECUTE on "+strings.Join(grant, ", ")+" to any other role")
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
				ORDER BY 1),
			ARRAY(SELECT DISTINCT r.rolname::text FROM aclexplode(p.proacl) a JOIN pg_roles r ON r.oid = a.grantee
				WHERE a.privilege_type = 'EXECUTE' AND a.is_grantable AND a.grantee <> p.proowner
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
		if err := rows.Scan(&fn.name, &fn.public, &fn.relay, &fn.others, &fn.grant); err != nil {
			return nil, fmt.Errorf("read the rights on the record functions: %w", err)
		}
		fns = append(fns, fn)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the rights on the record functions: %w", err)
	}
	return fns, nil
}

// readRecordOwners returns the owner of walbox_slots in schema and the other roles that own a
// record function, none when that owner is a superuser (it needs no function to move anything).
func readRecordOwners(ctx context.Context, conn *pgx.Conn, schema string) (string, []string, error) {
	var owner string
	var others []string
	err := conn.QueryRow(ctx, `SELECT r.rolname::text, ARRAY(SELECT DISTINCT pg_get_userbyid(p.proowner)::text FROM pg_proc p
			WHERE p.pronamespace = c.relnamespace AND p.proname = ANY($2) AND p.proowner <> c.relowner AND NOT r.rolsuper ORDER BY 1)
		FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner
		WHERE c.oid = to_regclass(quote_ident($1) || '.walbox_slots')`, schema, migrations.RecordFunctions).Scan(&owner, &others)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("read the owner of walbox_slots: %w", err)
	}
	return owner, others, nil
}

// readRecordWriters lists PUBLIC and the roles, but the owner, its members and superusers, granted
// any right but SELECT on walbox_slots in schema or on one of its columns.
func readRecordWriters(ctx context.Context, conn *pgx.Conn, schema string) ([]string, error) {
	var writers []string
	err := conn.QueryRow(ctx, `SELECT ARRAY(SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE r.rolname::text END
		FROM pg_class c CROSS JOIN LATERAL (SELECT c.relacl UNION ALL
			SELECT t.attacl FROM pg_attribute t WHERE t.attrelid = c.oid AND t.attnum > 0 AND t.attacl IS NOT NULL) acl(acl)
		CROSS JOIN LATERAL aclexplode(acl.acl) a LEFT JOIN pg_roles r ON r.oid = a.grantee
		WHERE c.oid = to_regclass(quote_ident($1) || '.walbox_slots') AND a.grantee <> c.relowner AND a.privilege_type <> 'SELECT'
		  AND (a.grantee = 0 OR NOT r.rolsuper AND NOT pg_has_role(r.oid, c.relowner, 'MEMBER'))
		ORDER BY 1)`, schema).Scan(&writers)
	if err != nil {
		return nil, fmt.Errorf("read the rights on walbox_slots: %w", err)
	}
	return writers, nil
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
