package doctor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/wire"
)

// rightsCheck checks who may move walbox's record of its slots. Only the owner and the relay roles
// that `walbox migrate --relay-role` recorded may. Whoever may can move the record past a gap. A
// replaced slot then goes unnoticed. It judges effective rights, so members of a role that holds a
// right count. So do pg_write_all_data and the schema's owner. Superusers may do anything and are
// only named. The role walbox run logs in as (--relay-role, else doctor's own) must be able to
// execute the record functions.
func (d doctor) rightsCheck(ctx context.Context, conn *pgx.Conn, f pgFacts) Check {
	const name = "record_rights"
	relay := d.relayRole
	if relay == "" {
		relay = f.User
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1)", relay).Scan(&exists); err != nil {
		return failCheck(name, "", "look up role %s: %v", relay, err)
	}
	if !exists {
		return failCheck(name, "set --relay-role to the role walbox run logs in as", "relay role %s does not exist", relay)
	}
	schema := d.registry
	rights, err := migrations.ReadRights(ctx, conn, schema)
	if err != nil {
		return failCheck(name, "", "%v", err)
	}
	fns, owned, err := readRecordFunctions(ctx, conn, schema)
	if err != nil {
		return failCheck(name, "", "%v", err)
	}
	// The relay role for the fix: the one named, else the one recorded, else doctor's own. Doctor's
	// own is left out when it is an owner or a superuser. The command walbox run may log in as
	// another role then.
	fixRelay := d.relayRole
	switch {
	case fixRelay != "":
	case len(rights.Relays) == 1:
		fixRelay = rights.Relays[0]
	case !owned && !f.Super:
		fixRelay = f.User
	}
	command := "walbox migrate --relay-role " + shellWord(fixRelay)
	if fixRelay == "" {
		command = "walbox migrate, with --relay-role naming the role walbox run logs in as unless that is the owner"
	}
	migrate := "as the outbox table's owner: " + command
	if len(fns) == 0 {
		return warnCheck(name, "run "+command+" as the outbox table's owner",
			"the functions that record walbox's slots are not in schema %s", schema)
	}
	var problems, fixes []string
	owner, fnOwners, err := readRecordOwners(ctx, conn, schema)
	if err != nil {
		return failCheck(name, "", "%v", err)
	}
	if len(fnOwners) > 0 {
		problems = append(problems, fmt.Sprintf("walbox_slots belongs to %s, the record functions to %s: %s can move the record, "+
			"and a trigger of its own on walbox_slots runs with the functions' owner's rights", owner, strings.Join(fnOwners, ", "), owner))
		fixes = append(fixes, fmt.Sprintf("as a superuser, after checking its rows: ALTER TABLE %s OWNER TO %s",
			quoteIdent(schema)+".walbox_slots", quoteIdent(fnOwners[0])))
	}
	if holder, trusted, err := migrations.ReadOwner(ctx, conn, schema, d.tables(), relay); err != nil {
		return failCheck(name, "", "%v", err)
	} else if !trusted {
		problems = append(problems, fmt.Sprintf("walbox_slots belongs to %s, which is no superuser, does not own %s and is not %s: "+
			"%s created walbox's record before walbox migrate did, or was given it, and can move it past a gap",
			holder, d.tables()[0], relay, holder))
		fixes = append(fixes, fmt.Sprintf("as a superuser, after checking its rows and the code of the record functions: "+
			"give walbox_slots, %s, walbox_migrations and the record functions in schema %s to the owner of %s (ALTER ... OWNER TO)",
			migrations.RelayRolesTable, quoteIdent(schema), d.tables()[0]))
	}
	if rights.RelaysOwner != "" {
		problems = append(problems, fmt.Sprintf("%s belongs to %s, not to the owner of walbox_slots: %s can name any role a relay role",
			migrations.RelayRolesTable, rights.RelaysOwner, rights.RelaysOwner))
		fixes = append(fixes, fmt.Sprintf("as a superuser, after checking its rows: ALTER TABLE %s.%s OWNER TO %s",
			quoteIdent(schema), migrations.RelayRolesTable, quoteIdent(owner)))
	} else if !rights.RelaysKnown && !rights.RelaysMissing {
		problems = append(problems, fmt.Sprintf("role %s may not read %s: walbox migrate --relay-role did not record %s as a relay role "+
			"(doctor run as the owner, a relay role or a superuser names the others)", f.User, migrations.RelayRolesTable, f.User))
		// Without the list, the role walbox run logs in as is taken for the relay role.
		for i, h := range rights.Holders {
			if h.Role == relay {
				rights.Holders[i].Execute = nil
			}
		}
	}
	var executes, grants, revokes []string
	writes := map[string][]string{}
	var tables []string
	for _, h := range rights.Holders {
		who := h.Role
		if len(h.Via) > 0 {
			who += " via " + strings.Join(h.Via, ", ")
			revokes = append(revokes, "REVOKE "+quoteRoles(h.Via)+" FROM "+quoteIdent(h.Role))
		}
		if h.Role == "PUBLIC" {
			if len(h.Execute) > 0 {
				problems = append(problems, "PUBLIC may execute "+strings.Join(h.Execute, ", ")+
					": any role that can log in can move walbox's record past a gap, and a replaced slot goes unnoticed")
			}
		} else if len(h.Execute) > 0 {
			executes = append(executes, who+"\x00"+strings.Join(h.Execute, ", "))
		}
		if len(h.Grant) > 0 {
			grants = append(grants, who+"\x00"+strings.Join(h.Grant, ", "))
		}
		for _, t := range h.Write {
			if _, ok := writes[t]; !ok {
				tables = append(tables, t)
			}
			writes[t] = append(writes[t], who)
		}
	}
	for _, t := range tables {
		problems = append(problems, "roles other than the owner may write "+t+" ("+strings.Join(writes[t], ", ")+
			"): they can move or delete walbox's record past a gap, or name the roles allowed to")
	}
	if len(executes) > 0 {
		accepted := "the owner"
		if len(rights.Relays) > 0 {
			accepted += " and " + strings.Join(rights.Relays, ", ")
		}
		problems = append(problems, "roles other than "+accepted+" may execute "+byObjects(executes)+
			": walbox migrate --relay-role did not grant it to them")
	}
	if len(grants) > 0 {
		problems = append(problems, "roles may grant EXECUTE on "+byObjects(grants)+" to any other role")
	}
	if len(rights.SchemaOwners) > 0 {
		problems = append(problems, fmt.Sprintf("%s may drop walbox_slots and the record functions, and create its own, "+
			"as the owner of schema %s or a member of its owner", strings.Join(rights.SchemaOwners, ", "), schema))
		fixes = append(fixes, fmt.Sprintf("as a superuser: ALTER SCHEMA %s OWNER TO %s, or make the schema's owner the owner of walbox's record",
			quoteIdent(schema), quoteIdent(owner)))
	}
	if len(rights.AlmostSuperusers) > 0 {
		var who, steps []string
		for _, h := range rights.AlmostSuperusers {
			w := h.Role
			if len(h.Via) > 0 {
				w += " via " + strings.Join(h.Via, ", ")
				steps = append(steps, "REVOKE "+quoteRoles(h.Via)+" FROM "+quoteIdent(h.Role))
			}
			if slices.Contains(h.Powers, "CREATEROLE") {
				steps = append(steps, "ALTER ROLE "+quoteIdent(h.Role)+" NOCREATEROLE")
			}
			who = append(who, w+" ("+strings.Join(h.Powers, ", ")+")")
		}
		problems = append(problems, strings.Join(who, ", ")+" may act as a superuser, or grant itself any role but a superuser, "+
			"the relay role and the owner of walbox's record among them, and then move the record")
		fixes = append(fixes, "as a superuser: "+strings.Join(steps, "; ")+
			" (CREATEROLE counts before PostgreSQL 16, which limits it to the roles a role created)")
	}
	var denied []string
	for _, role := range append([]string{relay}, rights.Relays...) {
		if slices.Contains(denied, role) {
			continue
		}
		missing, err := deniedFunctions(ctx, conn, schema, role)
		if err != nil {
			return failCheck(name, "", "%v", err)
		}
		if len(missing) > 0 {
			denied = append(denied, role)
			problems = append(problems, "role "+role+" may not execute "+strings.Join(missing, ", ")+": walbox run refuses to start")
		}
	}
	if len(problems) > 0 {
		// Two problems come with a fix of their own: the record's and the schema's owners. Migrate
		// puts the others right.
		if len(problems) > len(fixes) {
			fixes = append(fixes, migrate)
		}
		fixes = append(fixes, revokes...)
		return failCheck(name, strings.Join(fixes, "; then "), "%s", strings.Join(problems, "; "))
	}
	accepted := "the owner"
	if len(rights.Relays) > 0 {
		accepted += " and " + strings.Join(rights.Relays, ", ")
	}
	msg := fmt.Sprintf("only %s may move walbox's record of its slots (%d functions in schema %s)", accepted, len(fns), schema)
	if len(rights.Superusers) > 0 {
		msg += "; superusers may do anything (" + strings.Join(rights.Superusers, ", ") + ")"
	}
	return passCheck(name, "%s", msg)
}

// byObjects turns "role\x00objects" entries into "objects (role, role), objects (role)": roles
// that hold the same objects share one list.
func byObjects(entries []string) string {
	var keys []string
	roles := map[string][]string{}
	for _, e := range entries {
		who, objects, _ := strings.Cut(e, "\x00")
		if _, ok := roles[objects]; !ok {
			keys = append(keys, objects)
		}
		roles[objects] = append(roles[objects], who)
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " (" + strings.Join(roles[k], ", ") + ")"
	}
	return strings.Join(parts, ", ")
}

// quoteRoles quotes role names for SQL, separated by commas.
func quoteRoles(roles []string) string {
	q := make([]string, len(roles))
	for i, r := range roles {
		q[i] = quoteIdent(r)
	}
	return strings.Join(q, ", ")
}

// quoteIdent quotes a name for SQL unless it needs no quotes.
func quoteIdent(s string) string {
	if s != "" && (s[0] < '0' || s[0] > '9') && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789_") == "" {
		return s
	}
	return pgx.Identifier{s}.Sanitize()
}

// readRecordFunctions returns the names of the record functions in schema. It says whether doctor's
// role is a member of the owner of one of them.
func readRecordFunctions(ctx context.Context, conn *pgx.Conn, schema string) ([]string, bool, error) {
	var names []string
	var owned bool
	err := conn.QueryRow(ctx, `SELECT coalesce(pg_catalog.array_agg(p.proname::text ORDER BY p.proname), '{}'),
			coalesce(pg_catalog.bool_or(pg_catalog.pg_has_role(p.proowner, 'MEMBER')), false)
		FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname = ANY($2)`, schema, migrations.RecordFunctions).Scan(&names, &owned)
	if err != nil {
		return nil, false, fmt.Errorf("read the record functions: %w", err)
	}
	return names, owned, nil
}

// deniedFunctions lists the record functions in schema that role may not execute.
func deniedFunctions(ctx context.Context, conn *pgx.Conn, schema, role string) ([]string, error) {
	var denied []string
	err := conn.QueryRow(ctx, `SELECT ARRAY(SELECT p.proname::text
		FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname = ANY($2) AND NOT pg_catalog.has_function_privilege($3::text, p.oid, 'EXECUTE')
		ORDER BY 1)`, schema, migrations.RecordFunctions, role).Scan(&denied)
	if err != nil {
		return nil, fmt.Errorf("read the rights of %s on the record functions: %w", role, err)
	}
	return denied, nil
}

// readRecordOwners returns the owner of walbox_slots in schema and the other roles that own a
// record function. It returns none when that owner is a superuser: it needs no function to move
// anything.
func readRecordOwners(ctx context.Context, conn *pgx.Conn, schema string) (string, []string, error) {
	var owner string
	var others []string
	err := conn.QueryRow(ctx, `SELECT r.rolname::text, ARRAY(SELECT DISTINCT pg_catalog.pg_get_userbyid(p.proowner)::text FROM pg_catalog.pg_proc p
			WHERE p.pronamespace = c.relnamespace AND p.proname = ANY($2::text[]) AND p.proowner <> c.relowner AND NOT r.rolsuper ORDER BY 1)
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace JOIN pg_catalog.pg_roles r ON r.oid = c.relowner
		WHERE n.nspname = $1::text AND c.relname = 'walbox_slots'`, schema, migrations.RecordFunctions).Scan(&owner, &others)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("read the owner of walbox_slots: %w", err)
	}
	return owner, others, nil
}

// shellWord quotes s for a shell command line unless it needs no quoting.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// messageRightsCheck warns when any role may write a message walbox relays. PostgreSQL lets PUBLIC
// execute pg_logical_emit_message. So with messages relayed, every role that can log in can put an
// event on the broker. It does so under walbox's name, with or without walbox_emit.
func (d doctor) messageRightsCheck(ctx context.Context, conn *pgx.Conn) Check {
	const name = "message_rights"
	if d.prefix == "" {
		return passCheck(name, "messages off (--message-prefix none): no message reaches the broker through walbox")
	}
	var public bool
	var sigs []string
	err := conn.QueryRow(ctx, `SELECT coalesce(pg_catalog.bool_or(pg_catalog.has_function_privilege('public'::name, p.oid, 'EXECUTE')), false),
			coalesce(pg_catalog.array_agg(pg_catalog.format('pg_logical_emit_message(%s)', pg_catalog.pg_get_function_identity_arguments(p.oid)) ORDER BY p.oid), '{}')
		FROM pg_catalog.pg_proc p WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace`).Scan(&public, &sigs)
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

// tables are the outbox tables `walbox run` reads: their owners, and superusers, may own walbox's
// record.
func (d doctor) tables() []wire.Table {
	tables := []wire.Table{cmp.Or(d.table, wire.DefaultTable)}
	for _, m := range d.mappings {
		tables = append(tables, m.WithDefaults().Table)
	}
	return tables
}
