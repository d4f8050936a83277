package migrations

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
)

// RelayRolesTable is the table, beside walbox_slots, that records the relay roles `walbox migrate
// --relay-role` granted EXECUTE on the record functions.
const RelayRolesTable = "walbox_relay_roles"

// The schedule's tables (docs/outbox.md#scheduled-delivery). Each relay role may read and write
// them: the relay records, sends and deletes scheduled messages. They move no record.
const (
	ScheduleTable     = "walbox_schedule"
	ScheduleDoneTable = "walbox_schedule_done"
)

// recordTables are the registry's tables: whoever may write one may move the record, or the list
// of roles allowed to.
var recordTables = []string{"walbox_slots", RelayRolesTable}

// tableWrites are the rights on a registry table that move the record. TRIGGER counts: a trigger
// on walbox_slots runs inside the record functions, with their owner's rights.
var tableWrites = []string{"INSERT", "UPDATE", "DELETE", "TRUNCATE", "TRIGGER"}

// Holder is a role that may move walbox's record though it is no superuser. It is no member of the
// owner of what it holds either. And for EXECUTE, it is no recorded relay role.
type Holder struct {
	// Role is the role's name, or PUBLIC for every role.
	Role string
	// Execute lists the record functions it may execute.
	Execute []string
	// Grant lists the record functions on which it may grant EXECUTE to other roles.
	Grant []string
	// Write lists the registry tables it may write to, truncate or add a trigger to.
	Write []string
	// Via lists the roles it is a direct member of, through which it holds one of these rights.
	// They are the relay role, pg_write_all_data, or a member of one: the memberships to revoke.
	// Via is empty when it holds them only itself.
	Via []string
	// Powers, for an almost superuser (Rights.AlmostSuperusers), say what makes it one:
	//   - "CREATEROLE": its own;
	//   - "CREATEROLE of r": r is a role it is a member of;
	//   - the predefined role it is a member of: pg_execute_server_program, pg_write_server_files.
	Powers []string
}

// Rights says who may move walbox's record in one schema. It is judged by effective rights, not by
// ACL entries. Those are has_function_privilege, has_table_privilege and role membership. Members
// of a role that holds a right are counted, whether they inherit it or must SET ROLE first.
type Rights struct {
	// Relays are the recorded relay roles, by their current names.
	Relays []string
	// RelaysKnown is false when walbox_relay_roles is missing, or this role may not read it. A
	// registry migrated by an older walbox misses it. Holders then count every relay role.
	RelaysKnown bool
	// RelaysMissing is true when walbox_relay_roles is missing.
	RelaysMissing bool
	// RelaysOwner is the owner of walbox_relay_roles when it is not walbox_slots' owner (nor a
	// superuser). That is a role that created it before the first migrate. Relays is empty then.
	RelaysOwner string
	// Superusers may do anything in the database; they are expected, not counted as holders.
	Superusers []string
	// SchemaOwners own the schema, or are members of its owner, but not of the registry's owner.
	// They may drop walbox_slots and the record functions, and create their own.
	SchemaOwners []string
	// Holders are the other roles that may move the record, PUBLIC first.
	Holders []Holder
	// AlmostSuperusers are the roles that may log in and act as a superuser. Or they may make
	// themselves members of any role but a superuser, the relay role and the record's owner
	// included. These roles are almost superusers:
	//   - a role with CREATEROLE before PostgreSQL 16;
	//   - a member of pg_execute_server_program: it runs programs as the server's operating system
	//     user;
	//   - a member of pg_write_server_files.
	//
	// From 16 on, CREATEROLE gives only ADMIN on the roles a role created. Holders counts that
	// membership. Their members count too (Via). Superusers and members of the record's owner are
	// left out.
	AlmostSuperusers []Holder
}

// querier is a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// registryObjects are the record functions and tables in schema $1, with their owners. Each is
// listed once for each right that moves the record. Functions are named $2, tables $3, rights on a
// table $4. Only a few roles may hold a right:
//   - a superuser;
//   - a predefined role (pg_write_all_data);
//   - an object's owner;
//   - a role named in its ACL;
//   - the members of these.
//
// The function allowed judges only the first four (seeds). And holdersQuery judges the members of
// those that hold one. So the work grows with the roles the grants name, not with every role
// squared.
const registryObjects = `WITH ns AS (
		SELECT n.oid, n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = $1),
	obj AS (
		SELECT p.oid, p.proname::text AS name, p.proowner AS owner, x.priv, true AS fn, p.proacl AS acl
		  FROM pg_catalog.pg_proc p JOIN ns ON ns.oid = p.pronamespace
		 CROSS JOIN (VALUES ('EXECUTE'), ('EXECUTE WITH GRANT OPTION')) x(priv)
		 WHERE p.proname = ANY($2::text[])
		UNION ALL
		SELECT c.oid, c.relname::text, c.relowner, x.priv, false, c.relacl
		  FROM pg_catalog.pg_class c JOIN ns ON ns.oid = c.relnamespace
		 CROSS JOIN pg_catalog.unnest($4::text[]) x(priv)
		 WHERE c.relname = ANY($3::text[]) AND c.relkind IN ('r', 'p')),
	acl AS (
		SELECT o.acl FROM obj o
		UNION ALL
		SELECT t.attacl FROM obj o JOIN pg_catalog.pg_attribute t ON t.attrelid = o.oid
		 WHERE NOT o.fn AND t.attnum > 0 AND t.attacl IS NOT NULL),
	seeds AS (
		SELECT r.oid FROM pg_catalog.pg_roles r
		 WHERE r.rolsuper OR r.oid < 16384::pg_catalog.oid OR r.oid IN (SELECT o.owner FROM obj o)
		    OR r.oid IN (SELECT a.grantee FROM acl CROSS JOIN LATERAL pg_catalog.aclexplode(acl.acl) a)),
	allowed AS (
		SELECT r.oid AS role, o.oid, o.priv FROM seeds r CROSS JOIN obj o
		 WHERE CASE WHEN o.fn THEN pg_catalog.has_function_privilege(r.oid, o.oid, o.priv)
		            WHEN o.priv IN ('INSERT', 'UPDATE') THEN pg_catalog.has_any_column_privilege(r.oid, o.oid, o.priv)
		            ELSE pg_catalog.has_table_privilege(r.oid, o.oid, o.priv) END),
	members AS MATERIALIZED (
		SELECT x.oid, x.rolname, x.rolsuper FROM pg_catalog.pg_roles x
		 WHERE (x.oid >= 16384::pg_catalog.oid OR x.rolsuper)
		   AND EXISTS (SELECT 1 FROM (SELECT DISTINCT a.role FROM allowed a) a WHERE pg_catalog.pg_has_role(x.oid, a.role, 'MEMBER'))),
	everyone AS (
		SELECT o.oid, o.priv FROM obj o
		 WHERE CASE WHEN o.fn THEN pg_catalog.has_function_privilege('public', o.oid, o.priv)
		            WHEN o.priv IN ('INSERT', 'UPDATE') THEN pg_catalog.has_any_column_privilege('public', o.oid, o.priv)
		            ELSE pg_catalog.has_table_privilege('public', o.oid, o.priv) END)
	`

// holdersQuery lists each role that may use a right on a registry object. It says whether the role
// is a superuser, and whether it is a member of the object's owner. It lists the roles it is a
// direct member of that it holds the right through. Those are the memberships to revoke. Predefined
// roles (oids below 16384, such as pg_write_all_data) are left out: their members are listed. A
// right PUBLIC has is listed once, as PUBLIC.
const holdersQuery = registryObjects + `
	SELECT x.rolname::text, x.rolsuper, o.name, o.priv, o.fn, pg_catalog.pg_has_role(x.oid, o.owner, 'MEMBER'),
	       ARRAY(SELECT DISTINCT v.rolname::text FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles v ON v.oid = m.roleid
	              WHERE m.member = x.oid AND EXISTS (SELECT 1 FROM allowed a WHERE a.oid = o.oid AND a.priv = o.priv
	                AND pg_catalog.pg_has_role(m.roleid, a.role, 'MEMBER')) ORDER BY 1)
	  FROM members x CROSS JOIN obj o
	 WHERE NOT EXISTS (SELECT 1 FROM everyone e WHERE e.oid = o.oid AND e.priv = o.priv)
	   AND EXISTS (SELECT 1 FROM allowed a WHERE a.oid = o.oid AND a.priv = o.priv
	                 AND pg_catalog.pg_has_role(x.oid, a.role, 'MEMBER'))
	UNION ALL
	SELECT 'PUBLIC', false, o.name, o.priv, o.fn, false, '{}'::text[]
	  FROM obj o JOIN everyone e ON e.oid = o.oid AND e.priv = o.priv
	 ORDER BY 1, 3, 4`

// schemaOwnersQuery lists the roles, but superusers, that own schema $1 or are members of its
// owner. It leaves out the members of the owner of some registry object in it.
const schemaOwnersQuery = registryObjects + `
	SELECT x.rolname::text FROM pg_catalog.pg_roles x CROSS JOIN ns
	 WHERE NOT x.rolsuper AND x.oid >= 16384::pg_catalog.oid AND pg_catalog.pg_has_role(x.oid, ns.nspowner, 'MEMBER')
	   AND EXISTS (SELECT 1 FROM obj o WHERE NOT pg_catalog.pg_has_role(x.oid, o.owner, 'MEMBER'))
	 ORDER BY 1`

// almostSuperusersQuery lists the roles that may log in and hold a power (Holder.Powers). They hold
// it themselves or through a membership. It leaves out superusers and members of the owner of
// walbox_slots in schema $1. It lists their powers and the direct memberships that lead to one. It
// says whether they have CREATEROLE themselves.
const almostSuperusersQuery = `WITH powers AS MATERIALIZED (
		SELECT c.oid, c.rolname::pg_catalog.text AS name, c.rolcreaterole AS createrole FROM pg_catalog.pg_roles c
		 WHERE NOT c.rolsuper AND ((c.rolcreaterole AND pg_catalog.current_setting('server_version_num')::pg_catalog.int4 < 160000)
		    OR c.rolname IN ('pg_execute_server_program', 'pg_write_server_files'))),
	owner AS MATERIALIZED (
		SELECT s.relowner AS oid FROM pg_catalog.pg_class s JOIN pg_catalog.pg_namespace n ON n.oid = s.relnamespace
		 WHERE n.nspname = $1 AND s.relname = 'walbox_slots')
	SELECT x.rolname::pg_catalog.text,
		ARRAY(SELECT CASE WHEN p.oid = x.oid THEN 'CREATEROLE' WHEN p.createrole THEN 'CREATEROLE of ' || p.name ELSE p.name END
			FROM powers p WHERE pg_catalog.pg_has_role(x.oid, p.oid, 'MEMBER') ORDER BY p.oid <> x.oid, 1),
		ARRAY(SELECT DISTINCT v.rolname::pg_catalog.text FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles v ON v.oid = m.roleid
			WHERE m.member = x.oid AND EXISTS (SELECT 1 FROM powers p WHERE pg_catalog.pg_has_role(m.roleid, p.oid, 'MEMBER')) ORDER BY 1)
	FROM pg_catalog.pg_roles x
	WHERE x.rolcanlogin AND NOT x.rolsuper
	  AND EXISTS (SELECT 1 FROM powers p WHERE pg_catalog.pg_has_role(x.oid, p.oid, 'MEMBER'))
	  AND NOT EXISTS (SELECT 1 FROM owner s WHERE pg_catalog.pg_has_role(x.oid, s.oid, 'MEMBER'))
	ORDER BY 1`

// ReadRights reads who may move walbox's record in schema. Any role may call it; what it cannot
// read (walbox_relay_roles) it reports as not known.
func ReadRights(ctx context.Context, conn *pgx.Conn, schema string) (Rights, error) {
	return readRights(ctx, conn, schema)
}

func readRights(ctx context.Context, q querier, schema string) (Rights, error) {
	var r Rights
	var err error
	if r.Relays, r.RelaysKnown, r.RelaysMissing, r.RelaysOwner, err = readRelayRoles(ctx, q, schema); err != nil {
		return Rights{}, err
	}
	relay := make(map[string]bool, len(r.Relays))
	for _, name := range r.Relays {
		relay[name] = true
	}
	rows, err := q.Query(ctx, holdersQuery, schema, RecordFunctions, recordTables, tableWrites)
	if err != nil {
		return Rights{}, fmt.Errorf("read the rights on walbox's record: %w", err)
	}
	defer rows.Close()
	byRole := map[string]*Holder{}
	var order []string
	supers := map[string]bool{}
	for rows.Next() {
		var role, object, priv string
		var super, fn, owns bool
		var via []string
		if err := rows.Scan(&role, &super, &object, &priv, &fn, &owns, &via); err != nil {
			return Rights{}, fmt.Errorf("read the rights on walbox's record: %w", err)
		}
		switch {
		case super:
			supers[role] = true
			continue
		case owns, priv == "EXECUTE" && relay[role]:
			continue
		}
		h := byRole[role]
		if h == nil {
			h = &Holder{Role: role}
			byRole[role] = h
			order = append(order, role)
		}
		switch {
		case priv == "EXECUTE":
			h.Execute = appendNew(h.Execute, object)
		case fn:
			h.Grant = appendNew(h.Grant, object)
		default:
			h.Write = appendNew(h.Write, object)
		}
		for _, v := range via {
			h.Via = appendNew(h.Via, v)
		}
	}
	if err := rows.Err(); err != nil {
		return Rights{}, fmt.Errorf("read the rights on walbox's record: %w", err)
	}
	for _, role := range order {
		h := byRole[role]
		sort.Strings(h.Via)
		r.Holders = append(r.Holders, *h)
	}
	sort.SliceStable(r.Holders, func(i, j int) bool { return r.Holders[i].Role == "PUBLIC" && r.Holders[j].Role != "PUBLIC" })
	for s := range supers {
		r.Superusers = append(r.Superusers, s)
	}
	sort.Strings(r.Superusers)
	if r.AlmostSuperusers, err = readAlmostSuperusers(ctx, q, schema); err != nil {
		return Rights{}, err
	}
	rows, err = q.Query(ctx, schemaOwnersQuery, schema, RecordFunctions, recordTables, tableWrites)
	if err != nil {
		return Rights{}, fmt.Errorf("read the owner of schema %s: %w", schema, err)
	}
	if r.SchemaOwners, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return Rights{}, fmt.Errorf("read the owner of schema %s: %w", schema, err)
	}
	return r, nil
}

func readAlmostSuperusers(ctx context.Context, q querier, schema string) ([]Holder, error) {
	rows, err := q.Query(ctx, almostSuperusersQuery, schema)
	if err != nil {
		return nil, fmt.Errorf("read the almost superusers: %w", err)
	}
	defer rows.Close()
	var roles []Holder
	for rows.Next() {
		var h Holder
		if err := rows.Scan(&h.Role, &h.Powers, &h.Via); err != nil {
			return nil, fmt.Errorf("read the almost superusers: %w", err)
		}
		roles = append(roles, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the almost superusers: %w", err)
	}
	return roles, nil
}

// readRelayRoles returns the recorded relay roles in schema that still exist, by their current
// names. The result known is false when the table is missing, or this role may not read it. It is
// false too when the table belongs to another role (foreign) than walbox_slots, and to no
// superuser. Its rows are then that role's say.
func readRelayRoles(ctx context.Context, q querier, schema string) (names []string, known, missing bool, foreign string, err error) {
	var readable bool
	err = q.QueryRow(ctx, `SELECT pg_catalog.has_table_privilege(c.oid, 'SELECT'),
			CASE WHEN o.rolsuper OR c.relowner = s.relowner THEN '' ELSE o.rolname::text END
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_catalog.pg_roles o ON o.oid = c.relowner
		LEFT JOIN pg_catalog.pg_class s ON s.relnamespace = c.relnamespace AND s.relname = 'walbox_slots'
		WHERE n.nspname = $1 AND c.relname = $2`, schema, RelayRolesTable).Scan(&readable, &foreign)
	if err == pgx.ErrNoRows {
		return nil, false, true, "", nil
	}
	if err != nil {
		return nil, false, false, "", fmt.Errorf("look up %s: %w", RelayRolesTable, err)
	}
	if !readable || foreign != "" {
		return nil, false, false, foreign, nil
	}
	rows, err := q.Query(ctx, `SELECT r.rolname::text FROM `+pgx.Identifier{schema, RelayRolesTable}.Sanitize()+` w
		JOIN pg_catalog.pg_roles r ON r.oid = w.role_oid ORDER BY 1`)
	if err != nil {
		return nil, false, false, "", fmt.Errorf("read %s: %w", RelayRolesTable, err)
	}
	names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, false, false, "", fmt.Errorf("read %s: %w", RelayRolesTable, err)
	}
	return names, true, false, "", nil
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}
