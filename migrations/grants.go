package migrations

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// RecordFunctions are the functions that move walbox's record of a slot (walbox_slots). They run
// with their owner's rights, so whoever may execute them can move the record past a gap: only the
// owner and the relay's role may.
var RecordFunctions = []string{"walbox_slot_register", "walbox_slot_confirm", "walbox_slot_coverage", "walbox_slot_widen_coverage", "walbox_slot_stop"}

// RestrictRegistry takes EXECUTE on the record functions in schema from PUBLIC and grants it to
// the calling role. With relayRole it grants it to relayRole as well, and takes it from every
// other role; without, roles granted before keep it. It runs on every migrate, so a database
// migrated by an older walbox (PostgreSQL's default: PUBLIC may execute) is put right by the next.
func RestrictRegistry(ctx context.Context, conn *pgx.Conn, schema, relayRole string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin grants: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(lockKey)); err != nil {
		return fmt.Errorf("lock migrations: %w", err)
	}
	if relayRole != "" {
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", relayRole).Scan(&exists); err != nil {
			return fmt.Errorf("look up role %s: %w", relayRole, err)
		}
		if !exists {
			return fmt.Errorf("relay role %q does not exist: create it first (CREATE ROLE ... LOGIN REPLICATION)", relayRole)
		}
	}
	fns, err := recordFunctions(ctx, tx, schema, relayRole)
	if err != nil {
		return err
	}
	for _, f := range fns {
		stmts := []string{"REVOKE EXECUTE ON FUNCTION " + f.sig + " FROM PUBLIC", "GRANT EXECUTE ON FUNCTION " + f.sig + " TO CURRENT_USER"}
		if relayRole != "" {
			stmts = append(stmts, "GRANT EXECUTE ON FUNCTION "+f.sig+" TO "+pgx.Identifier{relayRole}.Sanitize())
		}
		for _, g := range f.others {
			stmts = append(stmts, "REVOKE EXECUTE ON FUNCTION "+f.sig+" FROM "+pgx.Identifier{g}.Sanitize())
		}
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("restrict %s: %w", f.sig, err)
			}
		}
	}
	// A role that neither owns the functions nor is a superuser gets a warning, not an error, from
	// REVOKE: make it one.
	var still []string
	if err := tx.QueryRow(ctx, `SELECT ARRAY(SELECT p.proname || ' (owner ' || pg_get_userbyid(p.proowner) || ')'
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname = ANY($2) AND (p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a
			WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')) ORDER BY 1)`, schema, RecordFunctions).Scan(&still); err != nil {
		return fmt.Errorf("read the record functions: %w", err)
	}
	if len(still) > 0 {
		return fmt.Errorf("PUBLIC may still execute %s: run walbox migrate as their owner", strings.Join(still, ", "))
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit grants: %w", err)
	}
	return nil
}

// recordFunction is one record function: its signature, quoted, and the roles to take EXECUTE
// from (with a relay role: every grantee but the owner, the caller and the relay role).
type recordFunction struct {
	sig    string
	others []string
}

func recordFunctions(ctx context.Context, tx pgx.Tx, schema, relayRole string) ([]recordFunction, error) {
	rows, err := tx.Query(ctx, `SELECT p.proname, pg_get_function_identity_arguments(p.oid),
			ARRAY(SELECT r.rolname FROM aclexplode(p.proacl) a JOIN pg_roles r ON r.oid = a.grantee
				WHERE a.privilege_type = 'EXECUTE' AND $3 <> ''
				  AND a.grantee <> p.proowner AND r.rolname <> current_user AND r.rolname <> $3
				ORDER BY 1)
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname = ANY($2)
		ORDER BY 1, 2`, schema, RecordFunctions, relayRole)
	if err != nil {
		return nil, fmt.Errorf("read the record functions: %w", err)
	}
	defer rows.Close()
	var fns []recordFunction
	for rows.Next() {
		var name, args string
		var others []string
		if err := rows.Scan(&name, &args, &others); err != nil {
			return nil, fmt.Errorf("read the record functions: %w", err)
		}
		fns = append(fns, recordFunction{sig: pgx.Identifier{schema, name}.Sanitize() + "(" + args + ")", others: others})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the record functions: %w", err)
	}
	return fns, nil
}
