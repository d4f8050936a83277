package migrations_test

import (
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// Apply runs on the caller's connection, under the caller's search_path. The application role
// owns the database, so on PostgreSQL 15 it may create in public. It plants an overload of
// pg_advisory_xact_lock taking float8, the preferred numeric type, which an untyped parameter takes over the built-in's
// bigint. RestrictRegistry called the lock unqualified: the overload ran as the migrating role.
func TestApplyRunsNoOverloadOnTheCallersConnection(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	testenv.RequireOwn(t, pg)
	db := pg.NewDatabase(t)
	app := testenv.UniqueName("app")
	ident := pgx.Identifier{app}.Sanitize()
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	dbName := pgx.Identifier{u.Path[1:]}.Sanitize()
	pg.Exec(t, db, "CREATE ROLE "+ident+" LOGIN; ALTER DATABASE "+dbName+" OWNER TO "+ident+"; GRANT CREATE ON SCHEMA public TO "+ident)
	t.Cleanup(func() {
		pg.Exec(t, db, "ALTER DATABASE "+dbName+" OWNER TO CURRENT_USER; DROP OWNED BY "+ident+"; DROP ROLE "+ident)
	})
	appURL := *u
	appURL.User = url.User(app)
	pg.Exec(t, appURL.String(), `CREATE TABLE public.captured (fn text, who text);
		GRANT INSERT ON public.captured TO PUBLIC;
		CREATE FUNCTION public.pg_advisory_xact_lock(float8) RETURNS void LANGUAGE sql AS $$
			INSERT INTO public.captured VALUES ('pg_advisory_xact_lock(float8)', current_user);
			SELECT pg_catalog.pg_advisory_xact_lock($1::pg_catalog.int8) $$`)

	conn := pg.Conn(t, db) // as an application opens it: the default search_path
	if _, err := migrations.Apply(t.Context(), conn, migrations.Config{Publication: testenv.UniqueName("pub")}); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(t.Context(), "SELECT fn || ' as ' || who FROM public.captured")
	if err != nil {
		t.Fatal(err)
	}
	ran, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(ran) > 0 {
		t.Errorf("migrations.Apply ran the application role's overloads: %v", ran)
	}
}

// The record functions were created, PUBLIC's to execute, in one transaction and restricted in the
// next. Between the two commits any role could record a slot (walbox_slot_register) before walbox
// did; and when the second failed (here: walbox_relay_roles made first by another role), PUBLIC kept
// EXECUTE for good. Now both happen in one transaction: a refused migrate leaves no function.
func TestRefusedMigrateLeavesNoFunctionPublicMayExecute(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	testenv.RequireOwn(t, pg)
	db := pg.NewDatabase(t)
	squatter := testenv.UniqueName("squatter")
	ident := pgx.Identifier{squatter}.Sanitize()
	pg.Exec(t, db, "CREATE ROLE "+ident+" LOGIN; CREATE SCHEMA squat; GRANT USAGE, CREATE ON SCHEMA squat TO "+ident)
	t.Cleanup(func() { pg.Exec(t, db, "DROP SCHEMA squat CASCADE; DROP OWNED BY "+ident+"; DROP ROLE "+ident) })
	pg.Exec(t, db, "SET ROLE "+ident+"; CREATE TABLE squat.walbox_relay_roles (role_oid oid PRIMARY KEY, role_name text NOT NULL)")

	conn := pg.Conn(t, db)
	if _, err := migrations.ApplyRegistry(t.Context(), conn, "squat"); err == nil {
		t.Fatal("migrate with walbox_relay_roles made by another role: no error, want a refusal")
	}
	var public []string
	if err := conn.QueryRow(t.Context(), `SELECT ARRAY(SELECT p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'squat' AND has_function_privilege('public', p.oid, 'EXECUTE') ORDER BY 1)`).Scan(&public); err != nil {
		t.Fatal(err)
	}
	if len(public) > 0 {
		t.Errorf("after a refused migrate, PUBLIC may execute %v", public)
	}
}
