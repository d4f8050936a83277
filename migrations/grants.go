package migrations

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/ownertrust"
)

// RecordFunctions are the functions that move walbox's record of a slot (walbox_slots). They run
// with their owner's rights, so whoever may execute them can move the record past a gap. Only the
// owner and the relay's role may.
var RecordFunctions = []string{"walbox_slot_register", "walbox_slot_confirm", "walbox_slot_coverage", "walbox_slot_widen_coverage", "walbox_slot_stop"}

// RestrictRegistry takes EXECUTE on the record functions in schema from PUBLIC and grants it to the
// calling role. With relayRole it grants it to relayRole as well, and takes it from every other
// role. Without relayRole, roles granted before keep it. They lose it if the owner's default
// privileges granted it to them. It runs on every migrate, so the next one puts right a database
// migrated by an older walbox. There PUBLIC may execute, as PostgreSQL's default has it.
func RestrictRegistry(ctx context.Context, conn *pgx.Conn, schema, relayRole string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin grants: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := pinSearchPath(ctx, tx); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock($1::pg_catalog.int8)", int64(lockKey)); err != nil {
		return fmt.Errorf("lock migrations: %w", err)
	}
	if err := restrictRegistry(ctx, tx, schema, relayRole); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit grants: %w", err)
	}
	return nil
}

// restrictRegistry is RestrictRegistry in tx, which holds the migrations' lock.
func restrictRegistry(ctx context.Context, tx pgx.Tx, schema, relayRole string) error {
	if relayRole != "" {
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1::pg_catalog.text)", relayRole).Scan(&exists); err != nil {
			return fmt.Errorf("look up role %s: %w", relayRole, err)
		}
		if !exists {
			return fmt.Errorf("relay role %q does not exist: create it first (CREATE ROLE ... LOGIN REPLICATION)", relayRole)
		}
	}
	if err := CheckDefiners(ctx, tx, schema); err != nil {
		return err
	}
	relays, err := recordRelay(ctx, tx, schema, relayRole)
	if err != nil {
		return err
	}
	fns, err := recordFunctions(ctx, tx, schema, relayRole)
	if err != nil {
		return err
	}
	for _, f := range fns {
		var stmts []string
		// A grant made by a role with the grant option survives a REVOKE by the owner. So take the
		// option back first, and with it (CASCADE) every grant made through it.
		for _, g := range f.grantors {
			stmts = append(stmts, "REVOKE GRANT OPTION FOR EXECUTE ON FUNCTION "+f.sig+" FROM "+pgx.Identifier{g}.Sanitize()+" CASCADE")
		}
		stmts = append(stmts, "REVOKE EXECUTE ON FUNCTION "+f.sig+" FROM PUBLIC", "GRANT EXECUTE ON FUNCTION "+f.sig+" TO CURRENT_USER")
		for _, g := range f.others {
			stmts = append(stmts, "REVOKE EXECUTE ON FUNCTION "+f.sig+" FROM "+pgx.Identifier{g}.Sanitize())
		}
		// The recorded relay roles keep EXECUTE: relayRole alone when it is set, else those
		// recorded before. They keep it even if the owner's default privileges granted it first.
		for _, r := range relays {
			stmts = append(stmts, "GRANT EXECUTE ON FUNCTION "+f.sig+" TO "+pgx.Identifier{r}.Sanitize())
		}
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("restrict %s: %w", f.sig, err)
			}
		}
	}
	if err := restrictTable(ctx, tx, schema); err != nil {
		return err
	}
	if err := restrictRelayRoles(ctx, tx, schema, relays); err != nil {
		return err
	}
	// A role that neither owns the functions nor is a superuser gets a warning from REVOKE. It gets
	// no error, so make it one.
	var still []string
	if err := tx.QueryRow(ctx, `SELECT ARRAY(SELECT p.proname || ' (owner ' || pg_catalog.pg_get_userbyid(p.proowner) || ')'
		FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1::pg_catalog.text AND p.proname = ANY($2::pg_catalog.text[])
		  AND pg_catalog.has_function_privilege('public'::pg_catalog.name, p.oid, 'EXECUTE') ORDER BY 1)`, schema, RecordFunctions).Scan(&still); err != nil {
		return fmt.Errorf("read the record functions: %w", err)
	}
	if len(still) > 0 {
		return fmt.Errorf("PUBLIC may still execute %s: run walbox migrate as their owner", strings.Join(still, ", "))
	}
	return nil
}

// recordFunction is one record function. It holds its signature, quoted. It holds the roles to take
// EXECUTE from:
//   - with a relay role, every grantee but the owner, the caller and the relay role;
//   - without, those the owner's default privileges granted it to.
//
// It holds the roles but the owner that may grant EXECUTE on it.
type recordFunction struct {
	sig      string
	others   []string
	grantors []string
}

func recordFunctions(ctx context.Context, tx pgx.Tx, schema, relayRole string) ([]recordFunction, error) {
	rows, err := tx.Query(ctx, `SELECT p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid),
			ARRAY(SELECT r.rolname FROM pg_catalog.aclexplode(p.proacl) a JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
				WHERE a.privilege_type = 'EXECUTE'
				  AND a.grantee <> p.proowner AND r.rolname <> current_user AND r.rolname <> $3::pg_catalog.text
				  AND ($3::pg_catalog.text <> '' OR a.grantee IN (SELECT d.grantee FROM pg_catalog.pg_default_acl x
					CROSS JOIN LATERAL pg_catalog.aclexplode(x.defaclacl) d
					WHERE x.defaclrole = p.proowner AND x.defaclobjtype = 'f' AND x.defaclnamespace IN (0, p.pronamespace)
					  AND d.privilege_type = 'EXECUTE'))
				ORDER BY 1),
			ARRAY(SELECT DISTINCT r.rolname FROM pg_catalog.aclexplode(p.proacl) a JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
				WHERE a.privilege_type = 'EXECUTE' AND a.is_grantable AND a.grantee <> p.proowner ORDER BY 1)
		FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1::pg_catalog.text AND p.proname = ANY($2::pg_catalog.text[])
		ORDER BY 1, 2`, schema, RecordFunctions, relayRole)
	if err != nil {
		return nil, fmt.Errorf("read the record functions: %w", err)
	}
	defer rows.Close()
	var fns []recordFunction
	for rows.Next() {
		var name, args string
		var others, grantors []string
		if err := rows.Scan(&name, &args, &others, &grantors); err != nil {
			return nil, fmt.Errorf("read the record functions: %w", err)
		}
		fns = append(fns, recordFunction{sig: pgx.Identifier{schema, name}.Sanitize() + "(" + args + ")", others: others, grantors: grantors})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the record functions: %w", err)
	}
	return fns, nil
}

// recordWriters lists the grantees of any right on walbox_slots in schema, or on one of its
// columns. It lists PUBLIC as such, and others quoted. It leaves out SELECT and the owner's own
// rights.
const recordWriters = `SELECT ARRAY(SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
		ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END
	FROM pg_catalog.pg_class c CROSS JOIN LATERAL (SELECT c.relacl UNION ALL
		SELECT t.attacl FROM pg_catalog.pg_attribute t WHERE t.attrelid = c.oid AND t.attnum > 0 AND t.attacl IS NOT NULL) acl(acl)
	CROSS JOIN LATERAL pg_catalog.aclexplode(acl.acl) a
	WHERE c.oid = pg_catalog.to_regclass(pg_catalog.quote_ident($1::pg_catalog.text) || '.walbox_slots') AND a.grantee <> c.relowner AND a.privilege_type <> 'SELECT'
	ORDER BY 1)`

// restrictTable takes every right on walbox_slots but SELECT from every role but the owner. Writing
// the record moves it past a gap as surely as the functions. And a trigger on it would run with the
// owner's rights inside them. Default privileges may have granted such rights.
func restrictTable(ctx context.Context, tx pgx.Tx, schema string) error {
	var grantees []string
	if err := tx.QueryRow(ctx, recordWriters, schema).Scan(&grantees); err != nil {
		return fmt.Errorf("read the rights on walbox_slots: %w", err)
	}
	table := pgx.Identifier{schema, "walbox_slots"}.Sanitize()
	for _, g := range grantees {
		if _, err := tx.Exec(ctx, "REVOKE ALL ON TABLE "+table+" FROM "+g+" CASCADE"); err != nil {
			return fmt.Errorf("restrict %s: %w", table, err)
		}
	}
	if len(grantees) > 0 {
		if _, err := tx.Exec(ctx, "GRANT SELECT ON TABLE "+table+" TO PUBLIC"); err != nil {
			return fmt.Errorf("restrict %s: %w", table, err)
		}
	}
	if err := tx.QueryRow(ctx, recordWriters, schema).Scan(&grantees); err != nil {
		return fmt.Errorf("read the rights on walbox_slots: %w", err)
	}
	if len(grantees) > 0 {
		return fmt.Errorf("%s may still write %s: run walbox migrate as its owner", strings.Join(grantees, ", "), table)
	}
	return nil
}

// recordRelay records relayRole, unless "", as the one relay role in schema's walbox_relay_roles.
// It drops the others, and roles dropped since. It returns the recorded roles' names. Without
// relayRole it changes nothing. So a role that may not write the list still gets through: walbox
// run creating a missing registry, or reshard.
func recordRelay(ctx context.Context, tx pgx.Tx, schema, relayRole string) ([]string, error) {
	table := pgx.Identifier{schema, RelayRolesTable}.Sanitize()
	if _, _, _, foreign, err := readRelayRoles(ctx, tx, schema); err != nil || foreign != "" {
		if err == nil {
			err = fmt.Errorf("%s belongs to %s, not to the owner of walbox_slots: %s can name any role a relay role; "+
				"as a superuser, after checking its rows: ALTER TABLE %s OWNER TO <the owner of walbox_slots>", RelayRolesTable, foreign, foreign, table)
		}
		return nil, err
	}
	if relayRole != "" {
		// Its owner is walbox_slots' (checked above). But a trigger of an untrusted owner would run
		// with this role's rights. An owner is untrusted when it may not run code as this role
		// anyway. An application role that migrated first is one, with a superuser migrating now.
		if err := ownertrust.Check(ctx, tx, table, "migrate --relay-role"); err != nil {
			return nil, err
		}
		for _, q := range []string{`DELETE FROM ` + table + ` w
			WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = w.role_oid AND r.rolname = $1::pg_catalog.text)`,
			`INSERT INTO ` + table + ` (role_oid, role_name)
			SELECT r.oid, r.rolname::pg_catalog.text FROM pg_catalog.pg_roles r WHERE r.rolname = $1::pg_catalog.text
			ON CONFLICT (role_oid) DO UPDATE SET role_name = excluded.role_name, recorded_at = pg_catalog.now()`} {
			if _, err := tx.Exec(ctx, q, relayRole); err != nil {
				return nil, fmt.Errorf("record the relay role in %s: %w", table, err)
			}
		}
	}
	relays, _, _, _, err := readRelayRoles(ctx, tx, schema)
	return relays, err
}

// restrictRelayRoles takes every right on walbox_relay_roles from every role but its owner. It lets
// each relay role read it: doctor run as that role reads it. Whoever may write it may add a role
// that doctor then accepts.
func restrictRelayRoles(ctx context.Context, tx pgx.Tx, schema string, relays []string) error {
	table := pgx.Identifier{schema, RelayRolesTable}.Sanitize()
	var grantees []string
	if err := tx.QueryRow(ctx, `SELECT ARRAY(SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
			ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END
		FROM pg_catalog.pg_class c CROSS JOIN LATERAL (SELECT c.relacl UNION ALL
			SELECT t.attacl FROM pg_catalog.pg_attribute t WHERE t.attrelid = c.oid AND t.attnum > 0 AND t.attacl IS NOT NULL) acl(acl)
		CROSS JOIN LATERAL pg_catalog.aclexplode(acl.acl) a
		WHERE c.oid = $1::pg_catalog.regclass AND a.grantee <> c.relowner ORDER BY 1)`, table).Scan(&grantees); err != nil {
		return fmt.Errorf("read the rights on %s: %w", table, err)
	}
	var stmts []string
	for _, g := range grantees {
		stmts = append(stmts, "REVOKE ALL ON TABLE "+table+" FROM "+g+" CASCADE")
	}
	schedule := pgx.Identifier{schema, ScheduleTable}.Sanitize() + ", " + pgx.Identifier{schema, ScheduleDoneTable}.Sanitize()
	for _, r := range relays {
		stmts = append(stmts, "GRANT SELECT ON TABLE "+table+" TO "+pgx.Identifier{r}.Sanitize(),
			"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "+schedule+" TO "+pgx.Identifier{r}.Sanitize())
	}
	for _, q := range stmts {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("restrict %s: %w", table, err)
		}
	}
	return nil
}

// CheckDefiners refuses (ErrRecordOwner) record functions whose owner does not trust the owner of
// walbox_slots (ownertrust). They write it with their owner's rights. So a trigger, rule or default
// of the table's owner runs with them. The outbox table's owner may have made a walbox_slots before
// the first migrate. If a superuser ran that migrate, the record functions were the superuser's.
// The relay's every confirm then ran the table owner's trigger as the superuser. The command walbox
// run checks it at each session, for a registry migrated before migrate checked it. It checks the
// schedule's tables as well (CheckScheduleOwners).
func CheckDefiners(ctx context.Context, q querier, schema string) error {
	if err := checkRecordDefiners(ctx, q, schema); err != nil {
		return err
	}
	return CheckScheduleOwners(ctx, q, schema)
}

func checkRecordDefiners(ctx context.Context, q querier, schema string) error {
	var table, owner string
	var definers []string
	err := q.QueryRow(ctx, `SELECT c.oid::pg_catalog.regclass::pg_catalog.text, o.rolname::pg_catalog.text,
			ARRAY(SELECT DISTINCT pg_catalog.pg_get_userbyid(p.proowner)::pg_catalog.text
				FROM pg_catalog.pg_proc p WHERE p.pronamespace OPERATOR(pg_catalog.=) c.relnamespace
				  AND p.proname OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.text[]) AND p.prosecdef
				  AND p.proowner OPERATOR(pg_catalog.<>) o.oid AND NOT o.rolsuper
				  AND NOT pg_catalog.pg_has_role(o.oid, p.proowner, 'MEMBER')
				ORDER BY 1)
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_roles o ON o.oid OPERATOR(pg_catalog.=) c.relowner
		WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(pg_catalog.quote_ident($1::pg_catalog.text)
			OPERATOR(pg_catalog.||) '.walbox_slots')::pg_catalog.oid`, schema, RecordFunctions).Scan(&table, &owner, &definers)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the owners of the record functions: %w", err)
	}
	if len(definers) == 0 {
		return nil
	}
	d := strings.Join(definers, ", ")
	return fmt.Errorf("%w: %s belongs to %s, but the record functions that write it run as %s: a trigger, rule or default of %s on it "+
		"would run as %s at every confirm; run walbox migrate as %s, or, after checking its triggers, rules and defaults, as a superuser: "+
		"ALTER TABLE %s OWNER TO %s", ErrRecordOwner, table, owner, d, owner, d, owner, table, pgx.Identifier{definers[0]}.Sanitize())
}

// cancelFunction cancels a scheduled message. It runs with its owner's rights and writes the
// schedule's tables.
const cancelFunction = "walbox_cancel"

// CheckScheduleOwners refuses (ErrRecordOwner) a walbox_schedule or walbox_schedule_done in schema
// that another role made first. The migrations keep a table that exists. Its owner's trigger, rule
// or default then runs as whoever writes it. The function walbox_cancel writes both with its owner's
// rights, often a superuser's. The relay role records and notes scheduled messages in them. So each
// must belong to a superuser, or to a role that may act as walbox_slots' owner and walbox_cancel's.
func CheckScheduleOwners(ctx context.Context, q querier, schema string) error {
	rows, err := q.Query(ctx, `SELECT pg_catalog.quote_ident($1::pg_catalog.text) OPERATOR(pg_catalog.||) '.'
				OPERATOR(pg_catalog.||) pg_catalog.quote_ident(c.relname::pg_catalog.text), o.rolname::pg_catalog.text,
			COALESCE(s.rolname::pg_catalog.text, ''),
			o.rolsuper OR s.oid IS NULL OR pg_catalog.pg_has_role(o.oid, s.oid, 'MEMBER'),
			ARRAY(SELECT DISTINCT pg_catalog.pg_get_userbyid(p.proowner)::pg_catalog.text
				FROM pg_catalog.pg_proc p WHERE p.pronamespace OPERATOR(pg_catalog.=) c.relnamespace
				  AND p.proname OPERATOR(pg_catalog.=) $3::pg_catalog.text AND p.prosecdef
				  AND NOT o.rolsuper AND NOT pg_catalog.pg_has_role(o.oid, p.proowner, 'MEMBER')
				ORDER BY 1)
		FROM pg_catalog.unnest($2::pg_catalog.text[]) WITH ORDINALITY t(name, i)
		JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(pg_catalog.quote_ident($1::pg_catalog.text)
			OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) t.name)::pg_catalog.oid
		JOIN pg_catalog.pg_roles o ON o.oid OPERATOR(pg_catalog.=) c.relowner
		LEFT JOIN pg_catalog.pg_class sc ON sc.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(pg_catalog.quote_ident($1::pg_catalog.text)
			OPERATOR(pg_catalog.||) '.walbox_slots')::pg_catalog.oid
		LEFT JOIN pg_catalog.pg_roles s ON s.oid OPERATOR(pg_catalog.=) sc.relowner
		ORDER BY t.i`, schema, []string{ScheduleTable, ScheduleDoneTable}, cancelFunction)
	if err != nil {
		return fmt.Errorf("read the owners of the schedule's tables: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var table, owner, slotsOwner string
		var trusted bool
		var definers []string
		if err := rows.Scan(&table, &owner, &slotsOwner, &trusted, &definers); err != nil {
			return fmt.Errorf("read the owners of the schedule's tables: %w", err)
		}
		if !trusted {
			return fmt.Errorf("%w: %s belongs to %s, which is no superuser and may not act as %s, the owner of walbox_slots: "+
				"a trigger, rule or default of %s on it would run as the relay role at every scheduled message, and as the owner of "+
				"walbox_cancel at every cancel; as a superuser, after checking its rows, triggers, rules and defaults: ALTER TABLE %s OWNER TO %s",
				ErrRecordOwner, table, owner, slotsOwner, owner, table, pgx.Identifier{slotsOwner}.Sanitize())
		}
		if len(definers) > 0 {
			d := strings.Join(definers, ", ")
			return fmt.Errorf("%w: %s belongs to %s, but walbox_cancel, which writes it, runs as %s: a trigger, rule or default of %s on it "+
				"would run as %s at every cancel; run walbox migrate as %s, or, after checking its triggers, rules and defaults, as a superuser: "+
				"ALTER TABLE %s OWNER TO %s", ErrRecordOwner, table, owner, d, owner, d, owner, table, pgx.Identifier{definers[0]}.Sanitize())
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the owners of the schedule's tables: %w", err)
	}
	return nil
}
