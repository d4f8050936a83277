package migrations_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
)

// walbox_cancel runs as its owner, a superuser under walbox migrate, and writes walbox_schedule_done.
// A role that may CREATE in the schema makes that table first, with a trigger. The migrations kept
// it, and the trigger ran as the superuser at a producer's cancel. Now migrate refuses, naming the
// table's owner. Given the table after migrate, the check walbox run makes at each session refuses.
func TestCancelRunsNoTriggerOfTheScheduleTablesMaker(t *testing.T) {
	conn, roles := superuserDatabase(t, "evil", "app")
	ctx := t.Context()
	evil, app := roles[0], roles[1]
	evilIdent, appIdent := pgx.Identifier{evil}.Sanitize(), pgx.Identifier{app}.Sanitize()
	exec(t, conn,
		"GRANT CREATE, USAGE ON SCHEMA public TO "+evilIdent,
		"CREATE TABLE public.trigger_ran (who text, super boolean)",
		"GRANT INSERT ON public.trigger_ran TO PUBLIC",
		"SET ROLE "+evilIdent,
		`CREATE TABLE public.walbox_schedule_done (message_id text NOT NULL, slot_name text NOT NULL,
			state text NOT NULL CHECK (state IN ('sent', 'cancelled')), done_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
			PRIMARY KEY (message_id, slot_name))`,
		`CREATE FUNCTION public.planted() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			INSERT INTO public.trigger_ran SELECT current_user, r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user;
			RETURN NEW; END $$`,
		"CREATE TRIGGER planted BEFORE INSERT ON public.walbox_schedule_done FOR EACH ROW EXECUTE FUNCTION public.planted()",
		"RESET ROLE")

	// With a relay role, migrate would grant it the table: the role's trigger would run as the relay.
	_, err := migrations.Apply(ctx, conn, migrations.Config{RelayRole: app})
	if !errors.Is(err, migrations.ErrRecordOwner) || !strings.Contains(err.Error(), "public.walbox_schedule_done belongs to "+evil) {
		t.Errorf("migrate --relay-role %s over a walbox_schedule_done made by %s: error %v, want a refusal naming it", app, evil, err)
	}
	_, err = migrations.Apply(ctx, conn, migrations.Config{})
	if err == nil {
		// What the refusal prevents: a producer's cancel runs the trigger as the superuser.
		exec(t, conn, "GRANT EXECUTE ON FUNCTION public.walbox_cancel(text) TO "+appIdent, "SET ROLE "+appIdent,
			"SELECT public.walbox_cancel('"+uuid.NewString()+"')", "RESET ROLE")
		var ran []string
		rows, qerr := conn.Query(ctx, "SELECT who || CASE WHEN super THEN ' (a superuser)' ELSE '' END FROM public.trigger_ran")
		if qerr == nil {
			ran, qerr = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		t.Fatalf("migrate accepted a walbox_schedule_done made by %s; at an app's cancel its trigger ran as %v (%v)", evil, ran, qerr)
	}
	if !errors.Is(err, migrations.ErrRecordOwner) || !strings.Contains(err.Error(), "public.walbox_schedule_done belongs to "+evil) ||
		!strings.Contains(err.Error(), "ALTER TABLE public.walbox_schedule_done OWNER TO") {
		t.Fatalf("migrate over a walbox_schedule_done made by %s: error %v, want a refusal naming it and the way out", evil, err)
	}

	// The way out the refusal names: the superuser checks the table and takes it.
	exec(t, conn, "DROP TRIGGER planted ON public.walbox_schedule_done", "ALTER TABLE public.walbox_schedule_done OWNER TO CURRENT_USER")
	if _, err := migrations.Apply(ctx, conn, migrations.Config{}); err != nil {
		t.Fatalf("migrate once the superuser owns walbox_schedule_done: %v", err)
	}

	// A schedule given to the role after migrate: walbox run checks it at each session.
	for _, table := range []string{"walbox_schedule", "walbox_schedule_done"} {
		exec(t, conn, "ALTER TABLE public."+table+" OWNER TO "+evilIdent)
		err := migrations.CheckDefiners(ctx, conn, "public")
		if !errors.Is(err, migrations.ErrRecordOwner) || !strings.Contains(err.Error(), "public."+table+" belongs to "+evil) {
			t.Errorf("the session check over %s owned by %s: error %v, want a refusal naming it", table, evil, err)
		}
		exec(t, conn, "ALTER TABLE public."+table+" OWNER TO CURRENT_USER")
	}
	if err := migrations.CheckDefiners(ctx, conn, "public"); err != nil {
		t.Errorf("the session check over a schedule the superuser owns: %v", err)
	}
	var ran int
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM public.trigger_ran").Scan(&ran); err != nil || ran > 0 {
		t.Errorf("the planted trigger ran %d times (%v)", ran, err)
	}
}

// An application role migrated the registry first, and the schedule's tables are its own. A
// superuser's later migrate keeps them, as walbox_slots: both belong to the role that owns the rest.
// walbox_cancel given to the superuser would run that role's trigger as the superuser: refused.
func TestScheduleOfTheRegistrysOwnerIsAccepted(t *testing.T) {
	conn, roles := superuserDatabase(t, "app")
	ctx := t.Context()
	app := roles[0]
	appIdent := pgx.Identifier{app}.Sanitize()
	t.Cleanup(func() { exec(t, conn, "DROP SCHEMA own CASCADE") }) // it holds objects of both roles
	exec(t, conn, "CREATE SCHEMA own AUTHORIZATION "+appIdent, "SET ROLE "+appIdent)
	if _, err := migrations.ApplyRegistry(ctx, conn, "own"); err != nil {
		t.Fatalf("migrate the registry as %s: %v", app, err)
	}
	exec(t, conn, "RESET ROLE")
	if _, err := migrations.ApplyRegistry(ctx, conn, "own"); err != nil {
		t.Fatalf("migrate, as a superuser, a registry %s migrated: %v", app, err)
	}
	exec(t, conn, "ALTER FUNCTION own.walbox_cancel(text) OWNER TO CURRENT_USER")
	err := migrations.CheckDefiners(ctx, conn, "own")
	if !errors.Is(err, migrations.ErrRecordOwner) || !strings.Contains(err.Error(), "own.walbox_schedule belongs to "+app+", but walbox_cancel") {
		t.Errorf("the session check over walbox_cancel of a superuser, writing tables of %s: error %v, want a refusal naming both", app, err)
	}
}

// superuserDatabase returns a connection, as a superuser, to a new database. It creates a
// role for each prefix, dropped at the end. It skips the test when the test's role is no superuser.
func superuserDatabase(t *testing.T, prefixes ...string) (*pgx.Conn, []string) {
	t.Helper()
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	conn := pg.Conn(t, db)
	var super bool
	if err := conn.QueryRow(t.Context(), "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user").Scan(&super); err != nil || !super {
		t.Skipf("the test's role is no superuser (%v)", err)
	}
	var roles []string
	for _, p := range prefixes {
		r := testenv.UniqueName(p)
		ident := pgx.Identifier{r}.Sanitize()
		pg.Exec(t, pg.URL(), "CREATE ROLE "+ident)
		t.Cleanup(func() {
			pg.Exec(t, db, "DROP OWNED BY "+ident)
			pg.Exec(t, pg.URL(), "DROP ROLE "+ident)
		})
		roles = append(roles, r)
	}
	return conn, roles
}

func exec(t *testing.T, conn *pgx.Conn, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := conn.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
