package doctor

import (
	"cmp"
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/wire"
)

// scheduleCheck judges scheduled delivery: the schedule's tables exist, and their owners are
// walbox's (migrations.CheckScheduleOwners). This role, the relay's, may write them. A relay that
// may not fails its session at each message due later, for good. Before migration 018 the relay
// records such messages but sends none.
func (d doctor) scheduleCheck(ctx context.Context, conn *pgx.Conn) Check {
	const name = "schedule"
	schema := cmp.Or(d.table, wire.DefaultTable).Schema
	sched := pgx.Identifier{schema, migrations.ScheduleTable}.Sanitize()
	done := pgx.Identifier{schema, migrations.ScheduleDoneTable}.Sanitize()
	var exists, writes, migrated bool
	var role string
	err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1::pg_catalog.text) IS NOT NULL AND pg_catalog.to_regclass($2::pg_catalog.text) IS NOT NULL,
			coalesce((SELECT pg_catalog.bool_and(pg_catalog.has_table_privilege(t, p))
				FROM pg_catalog.unnest(ARRAY[pg_catalog.to_regclass($1::pg_catalog.text), pg_catalog.to_regclass($2::pg_catalog.text)]) t,
				     pg_catalog.unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) p), false),
			current_user::pg_catalog.text,
			EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($2::pg_catalog.text)
				AND a.attname OPERATOR(pg_catalog.=) 'sent_by' AND NOT a.attisdropped)`, sched, done).Scan(&exists, &writes, &role, &migrated)
	switch {
	case err != nil:
		return failCheck(name, "", "read the schedule's tables: %v", err)
	case !exists:
		return warnCheck(name, "run walbox migrate", "%s is missing: a row due later (deliver_at) stops the relay at each try", sched)
	}
	// A table another role made first runs that role's trigger in walbox_cancel and in the relay.
	if err := migrations.CheckScheduleOwners(ctx, conn, schema); err != nil {
		return failCheck(name, "", "%v", err)
	}
	switch {
	case !writes:
		return warnCheck(name, "as the owner: walbox migrate --relay-role "+shellWord(role),
			"role %s may not read and write %s and %s: a row due later (deliver_at) stops the relay at each try", role, sched, done)
	case !migrated:
		return warnCheck(name, "run walbox migrate",
			"%s has no column sent_by (migration 018): rows due later (deliver_at) are recorded, none sent", done)
	}
	return passCheck(name, "role %s may hold messages due later in %s", role, sched)
}
