// Package ownertrust decides whether walbox may write a table with the rights of the role it runs
// as. It may only when no code of a less privileged role can run in its session.
//
// A trigger, rule, default, check or policy of a table's owner runs with the rights of whoever
// writes the table. Taking the owner's role first (SET ROLE) contains nothing in a superuser's
// session: the owner's code may RESET ROLE. Nor does a SECURITY DEFINER function contain it. Before
// PostgreSQL 18, a deferred trigger fires at commit with the session's role. And a prepared
// statement the code leaves behind outlives the function. So walbox writes only tables whose owner
// may act as walbox's role anyway. For the others, it names the owner and the way out. See
// docs/architecture.md for the commands that write tables.
package ownertrust

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrOwner is returned by Check for a table of an owner walbox's role may not let run code.
var ErrOwner = errors.New("the table belongs to a role whose code would run with walbox's rights")

// Querier is a connection, pool or transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Owner is the owner of a table, judged against the role walbox runs as.
type Owner struct {
	// Table is the table's name, with its schema unless pg_catalog.
	Table string
	// Name is the owner's name; "" when the table does not exist.
	Name string
	// Caller is the role walbox runs as (current_user).
	Caller string
	// Trusted is true when the owner is the caller, a superuser, or a member of the caller. Its
	// code, run as the caller, gains nothing. It is true for a missing table.
	Trusted bool
}

// Read reads the owner of table (quoted, with its schema).
func Read(ctx context.Context, q Querier, table string) (Owner, error) {
	o := Owner{Trusted: true}
	err := q.QueryRow(ctx, `SELECT c.oid::pg_catalog.regclass::pg_catalog.text, o.rolname::pg_catalog.text, current_user::pg_catalog.text,
			o.rolsuper OR o.rolname OPERATOR(pg_catalog.=) current_user OR pg_catalog.pg_has_role(o.oid, current_user, 'MEMBER')
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_roles o ON o.oid OPERATOR(pg_catalog.=) c.relowner
		WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1::pg_catalog.text)::pg_catalog.oid`, table).
		Scan(&o.Table, &o.Name, &o.Caller, &o.Trusted)
	if errors.Is(err, pgx.ErrNoRows) {
		return Owner{Trusted: true}, nil
	}
	if err != nil {
		return Owner{}, fmt.Errorf("read the owner of %s: %w", table, err)
	}
	return o, nil
}

// Check returns an error wrapping ErrOwner unless walbox's role may write table. Owner.Trusted says
// when it may. command names the walbox command that writes it, for the way out.
func Check(ctx context.Context, q Querier, table, command string) error {
	o, err := Read(ctx, q, table)
	if err != nil || o.Trusted {
		return err
	}
	return fmt.Errorf("%w: %s belongs to %s, and %s is not %s: a trigger, rule or default of %s on it would run as %s; "+
		"run walbox %s as %s, or, after checking its triggers, rules and defaults, as a superuser: ALTER TABLE %s OWNER TO %s",
		ErrOwner, o.Table, o.Name, o.Caller, o.Name, o.Name, o.Caller, command, o.Name, o.Table, pgx.Identifier{o.Caller}.Sanitize())
}
