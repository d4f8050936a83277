package doctor_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/doctor"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/outbox"
)

// recordFunctionSigs are the record functions with their arguments, for GRANT and REVOKE.
var recordFunctionSigs = []string{
	"walbox_slot_register(text, text, integer, text, pg_lsn, pg_lsn, xid8)",
	"walbox_slot_confirm(text, integer, pg_lsn, xid8)",
	"walbox_slot_coverage(text, text)",
	"walbox_slot_widen_coverage(text, text, text)",
	"walbox_slot_stop(text, text, pg_lsn)",
}

// onRecordFunctions returns "FUNCTION schema.f(args), ..." for every record function.
func onRecordFunctions(schema string) string {
	fns := make([]string, len(recordFunctionSigs))
	for i, f := range recordFunctionSigs {
		fns[i] = pgx.Identifier{schema}.Sanitize() + "." + f
	}
	return "FUNCTION " + strings.Join(fns, ", ")
}

// rightsAs runs doctor as the role of dbURL and returns its record_rights check.
func (e *env) rightsAs(t *testing.T, dbURL string) doctor.Check {
	t.Helper()
	cfg := e.cfg
	cfg.DatabaseURL = dbURL
	return find(t, doctor.Run(t.Context(), cfg), "record_rights")
}

// Rights that reach a role through another are rights all the same: a member of the relay role (with
// or without INHERIT), a member of pg_write_all_data, a role granted EXECUTE by hand. doctor judges
// what each role may do, not the grants in the ACLs, and fails each, naming it, whether it runs as
// the owner and superuser or as the relay role.
func TestRecordRightsSeeEveryRoleThatMayMoveTheRecord(t *testing.T) {
	e := setup(t)
	relayURL := e.roleURL(t, "LOGIN REPLICATION")
	relay := roleOf(t, relayURL)
	if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "public", relay); err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{e.db, relayURL} {
		if c := e.rightsAs(t, url); c.Status != "pass" || !strings.Contains(c.Message, "only the owner and "+relay+" may move") {
			t.Fatalf("record_rights as %s before any other role: %s %q (fix %q), want a pass naming %s", roleOf(t, url), c.Status, c.Message, c.Fix, relay)
		}
	}
	for _, tc := range []struct {
		name, attrs, grant string
		want               func(role string) string
	}{
		{"member of the relay role", "LOGIN", "GRANT " + pgx.Identifier{relay}.Sanitize() + " TO %s",
			func(role string) string { return "(" + role + " via " + relay + ")" }},
		{"member of the relay role without INHERIT", "LOGIN NOINHERIT", "GRANT " + pgx.Identifier{relay}.Sanitize() + " TO %s",
			func(role string) string { return "(" + role + " via " + relay + ")" }},
		{"member of pg_write_all_data", "LOGIN", "GRANT pg_write_all_data TO %s",
			func(role string) string { return "may write walbox_slots (" + role + " via pg_write_all_data" }},
		{"EXECUTE granted by hand", "LOGIN", "GRANT EXECUTE ON " + onRecordFunctions("public") + " TO %s",
			func(role string) string { return "(" + role + "): walbox migrate --relay-role did not grant it" }},
		{"a write on the list of relay roles", "LOGIN", "GRANT INSERT ON public.walbox_relay_roles TO %s",
			func(role string) string { return "may write walbox_relay_roles (" + role + ")" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			roleURL := e.roleURL(t, tc.attrs)
			role := roleOf(t, roleURL)
			e.pg.Exec(t, e.db, strings.ReplaceAll(tc.grant, "%s", pgx.Identifier{role}.Sanitize()))
			if strings.Contains(tc.name, "by hand") {
				// doctor run as the role itself no longer takes it for the relay's.
				c := e.rightsAs(t, roleURL)
				if c.Status != "fail" || !strings.Contains(c.Message, "walbox migrate --relay-role did not record "+role) ||
					!strings.Contains(c.Fix, "walbox migrate --relay-role "+role) {
					t.Errorf("record_rights as %s: %s %q (fix %q), want a failure: migrate did not record it", role, c.Status, c.Message, c.Fix)
				}
			}
			for _, url := range []string{e.db, relayURL} {
				c := e.rightsAs(t, url)
				if c.Status != "fail" || !strings.Contains(c.Message, tc.want(role)) {
					t.Errorf("record_rights as %s: %s %q, want a failure saying %q", roleOf(t, url), c.Status, c.Message, tc.want(role))
				}
				if !strings.Contains(c.Fix, "walbox migrate --relay-role "+relay) {
					t.Errorf("record_rights as %s: fix %q, want walbox migrate --relay-role %s", roleOf(t, url), c.Fix, relay)
				}
			}
		})
	}
	if c := e.rightsAs(t, e.db); c.Status != "pass" {
		t.Errorf("record_rights once the roles are gone: %s %q, want pass", c.Status, c.Message)
	}
}

// The setup: walbox's record belongs to one role, and another role owns the schema it is in
// (on PostgreSQL 15, the database's owner owns public). That role may drop walbox_slots and create
// its own: doctor fails, naming it. A schema the record's owner owns passes.
func TestRecordRightsSeeTheSchemasOwner(t *testing.T) {
	e := setup(t)
	appURL := e.roleURL(t, "LOGIN")
	app := pgx.Identifier{roleOf(t, appURL)}.Sanitize()
	dbName := strings.TrimPrefix(e.pg.Conn(t, e.db).Config().Database, "/")
	e.pg.Exec(t, e.db, "ALTER DATABASE "+pgx.Identifier{dbName}.Sanitize()+" OWNER TO "+app)
	t.Cleanup(func() {
		e.pg.Exec(t, e.db, "ALTER DATABASE "+pgx.Identifier{dbName}.Sanitize()+" OWNER TO CURRENT_USER")
	})
	var publicOwner string
	if err := e.conn.QueryRow(t.Context(), "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'public'").Scan(&publicOwner); err != nil {
		t.Fatal(err)
	}
	if publicOwner == "pg_database_owner" {
		c := find(t, doctor.Run(t.Context(), e.cfg), "record_rights")
		if c.Status != "fail" || !strings.Contains(c.Message, roleOf(t, appURL)+" may drop walbox_slots") ||
			!strings.Contains(c.Fix, "ALTER SCHEMA public OWNER TO") {
			t.Errorf("record_rights with public owned by the database's owner: %s %q (fix %q), want a failure naming %s",
				c.Status, c.Message, c.Fix, app)
		}
	}

	e.pg.Exec(t, e.db, "CREATE SCHEMA squat AUTHORIZATION "+app)
	t.Cleanup(func() { e.pg.Exec(t, e.db, "DROP SCHEMA squat CASCADE") })
	if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "squat", ""); err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.Table.Schema = "squat"
	c := find(t, doctor.Run(t.Context(), cfg), "record_rights")
	if c.Status != "fail" || !strings.Contains(c.Message, roleOf(t, appURL)+" may drop walbox_slots and the record functions") {
		t.Errorf("record_rights in a schema %s owns: %s %q, want a failure naming it", app, c.Status, c.Message)
	}
	// What doctor fails is real: the schema's owner replaces the record.
	e.pg.Exec(t, appURL, "BEGIN; DROP TABLE squat.walbox_slots; CREATE TABLE squat.walbox_slots (slot_name text); ROLLBACK")
	e.pg.Exec(t, e.db, "ALTER SCHEMA squat OWNER TO CURRENT_USER")
	if c := find(t, doctor.Run(t.Context(), cfg), "record_rights"); c.Status != "pass" {
		t.Errorf("record_rights once the schema is the record owner's: %s %q, want pass", c.Status, c.Message)
	}
}

// doctor run by the record's owner, not a superuser, accepts the relay role migrate granted (it
// failed it, and suggested --relay-role with the owner's own name). A member of the owner is the
// owner; a member of the relay role fails, with the recorded relay role in the fix.
func TestRecordRightsAsTheOwner(t *testing.T) {
	e := setup(t)
	ownerURL := e.roleURL(t, "LOGIN")
	owner := pgx.Identifier{roleOf(t, ownerURL)}.Sanitize()
	relay := roleOf(t, e.roleURL(t, "LOGIN REPLICATION"))
	e.pg.Exec(t, e.db, "CREATE SCHEMA own AUTHORIZATION "+owner)
	t.Cleanup(func() { e.pg.Exec(t, e.db, "DROP SCHEMA own CASCADE") }) // migrate's own table in it is not the owner's
	if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "own", relay); err != nil {
		t.Fatal(err)
	}
	e.pg.Exec(t, e.db, "ALTER TABLE own.walbox_slots OWNER TO "+owner+"; ALTER TABLE own.walbox_relay_roles OWNER TO "+owner)
	for _, f := range recordFunctionSigs {
		e.pg.Exec(t, e.db, "ALTER FUNCTION own."+f+" OWNER TO "+owner)
	}
	cfg := e.cfg
	cfg.Table.Schema = "own"
	cfg.DatabaseURL = ownerURL
	c := find(t, doctor.Run(t.Context(), cfg), "record_rights")
	if c.Status != "pass" || !strings.Contains(c.Message, "only the owner and "+relay+" may move") {
		t.Errorf("record_rights as the owner: %s %q (fix %q), want a pass naming %s", c.Status, c.Message, c.Fix, relay)
	}
	ownerMember := roleOf(t, e.roleURL(t, "LOGIN"))
	relayMember := roleOf(t, e.roleURL(t, "LOGIN"))
	e.pg.Exec(t, e.db, "GRANT "+owner+" TO "+pgx.Identifier{ownerMember}.Sanitize()+"; GRANT "+pgx.Identifier{relay}.Sanitize()+
		" TO "+pgx.Identifier{relayMember}.Sanitize())
	c = find(t, doctor.Run(t.Context(), cfg), "record_rights")
	if c.Status != "fail" || !strings.Contains(c.Message, relayMember+" via "+relay) || strings.Contains(c.Message, ownerMember) {
		t.Errorf("record_rights as the owner with members: %s %q, want a failure naming %s and not %s", c.Status, c.Message, relayMember, ownerMember)
	}
	if !strings.Contains(c.Fix, "walbox migrate --relay-role "+relay) || !strings.Contains(c.Fix, "REVOKE "+relay+" FROM "+relayMember) ||
		strings.Contains(c.Fix, "--relay-role "+roleOf(t, ownerURL)) {
		t.Errorf("record_rights fix %q: want --relay-role %s and the REVOKE of the membership", c.Fix, relay)
	}
}

// migrate records the relay role it grants, and only that one: a later --relay-role replaces it,
// and the one before loses EXECUTE. A migrate without --relay-role keeps the recorded role and gives
// back a grant taken by hand. The relay role may read the list; another role may not, and doctor
// run as it says so instead of guessing. Superusers are named, not failed.
func TestMigrateRecordsTheRelayRole(t *testing.T) {
	e := setup(t)
	firstURL, secondURL := e.roleURL(t, "LOGIN REPLICATION"), e.roleURL(t, "LOGIN REPLICATION")
	first, second := roleOf(t, firstURL), roleOf(t, secondURL)
	admin := roleOf(t, e.roleURL(t, "SUPERUSER"))
	recorded := func() []string {
		t.Helper()
		rows, err := e.conn.Query(t.Context(), "SELECT role_name FROM public.walbox_relay_roles ORDER BY 1")
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	for _, relay := range []string{first, second} {
		if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "public", relay); err != nil {
			t.Fatal(err)
		}
		if got := recorded(); len(got) != 1 || got[0] != relay {
			t.Errorf("recorded relay roles after migrate --relay-role %s: %v", relay, got)
		}
	}
	c := e.rightsAs(t, e.db)
	if c.Status != "pass" || !strings.Contains(c.Message, "only the owner and "+second+" may move") || !strings.Contains(c.Message, admin) {
		t.Errorf("record_rights after --relay-role %s: %s %q, want a pass naming it and the superuser %s", second, c.Status, c.Message, admin)
	}
	if c := e.rightsAs(t, firstURL); c.Status != "fail" || !strings.Contains(c.Message, "role "+first+" may not execute") {
		t.Errorf("record_rights as the relay role replaced: %s %q, want a failure: it may not execute", c.Status, c.Message)
	}
	if c := e.rightsAs(t, secondURL); c.Status != "pass" {
		t.Errorf("record_rights as the recorded relay role: %s %q (fix %q), want pass", c.Status, c.Message, c.Fix)
	}
	e.pg.Exec(t, e.db, "REVOKE EXECUTE ON "+onRecordFunctions("public")+" FROM "+pgx.Identifier{second}.Sanitize())
	if c := e.rightsAs(t, e.db); c.Status != "fail" || !strings.Contains(c.Message, "role "+second+" may not execute") {
		t.Errorf("record_rights as the owner with the relay's grant taken: %s %q, want a failure naming %s", c.Status, c.Message, second)
	}
	if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "public", ""); err != nil {
		t.Fatal(err)
	}
	if c := e.rightsAs(t, secondURL); c.Status != "pass" || len(recorded()) != 1 {
		t.Errorf("record_rights after migrate without --relay-role: %s %q, recorded %v: want pass and %s kept", c.Status, c.Message, recorded(), second)
	}
	if c := e.rightsAs(t, e.roleURL(t, "LOGIN")); c.Status != "fail" || !strings.Contains(c.Message, "may not read walbox_relay_roles") {
		t.Errorf("record_rights as a role with no grants: %s %q, want a failure: it may not read the list", c.Status, c.Message)
	}
}

// A role that may CREATE in the outbox schema creates walbox_relay_roles before migrate does, and
// lists itself. migrate refuses to record a relay role in it, naming that role; and a list of
// another owner than walbox_slots' fails doctor: none of its rows is taken for a relay role.
func TestRelayRolesOfAnotherOwnerAreRefused(t *testing.T) {
	e := setup(t)
	squatter := roleOf(t, e.roleURL(t, "LOGIN"))
	relay := roleOf(t, e.roleURL(t, "LOGIN REPLICATION"))
	e.pg.Exec(t, e.db, "CREATE SCHEMA squat; GRANT USAGE, CREATE ON SCHEMA squat TO "+pgx.Identifier{squatter}.Sanitize())
	t.Cleanup(func() { e.pg.Exec(t, e.db, "DROP SCHEMA squat CASCADE") })
	e.pg.Exec(t, e.db, "SET ROLE "+pgx.Identifier{squatter}.Sanitize()+`;
		CREATE TABLE squat.walbox_relay_roles (role_oid oid PRIMARY KEY, role_name text NOT NULL, recorded_at timestamptz NOT NULL DEFAULT now());
		INSERT INTO squat.walbox_relay_roles (role_oid, role_name) SELECT oid, rolname FROM pg_roles WHERE rolname = current_user;
		GRANT ALL ON squat.walbox_relay_roles TO PUBLIC`)
	_, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "squat", relay)
	if err == nil || !strings.Contains(err.Error(), "walbox_relay_roles belongs to "+squatter) {
		t.Errorf("migrate --relay-role %s with walbox_relay_roles owned by %s: error %v, want a refusal naming it", relay, squatter, err)
	}

	if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "public", relay); err != nil {
		t.Fatal(err)
	}
	e.pg.Exec(t, e.db, "ALTER TABLE public.walbox_relay_roles OWNER TO "+pgx.Identifier{squatter}.Sanitize())
	c := find(t, doctor.Run(t.Context(), e.cfg), "record_rights")
	if c.Status != "fail" || !strings.Contains(c.Message, "walbox_relay_roles belongs to "+squatter) ||
		!strings.Contains(c.Fix, "ALTER TABLE public.walbox_relay_roles OWNER TO") {
		t.Errorf("record_rights with walbox_relay_roles owned by %s: %s %q (fix %q), want a failure naming it", squatter, c.Status, c.Message, c.Fix)
	}
	e.pg.Exec(t, e.db, "ALTER TABLE public.walbox_relay_roles OWNER TO CURRENT_USER")
}

// PostgreSQL 16 gave each membership its own options: INHERIT, SET and ADMIN. A member that may
// only SET ROLE to the relay role, and a role with only ADMIN on it (the CREATEROLE role that
// created it, which may grant itself the rest), may both move the record: doctor fails each.
func TestRecordRightsSeeMembershipOptions(t *testing.T) {
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL 17 and RabbitMQ")
	}
	pg := testenv.StartPostgres(t, testenv.PGVersion(17))
	e := setupOn(t, pg)
	creatorURL := e.roleURL(t, "LOGIN CREATEROLE")
	creator := roleOf(t, creatorURL)
	relay := testenv.UniqueName("relay")
	e.pg.Exec(t, creatorURL, "CREATE ROLE "+relay+" LOGIN")
	t.Cleanup(func() { e.pg.Exec(t, e.db, "DROP OWNED BY "+relay+"; DROP ROLE "+relay) })
	if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "public", relay); err != nil {
		t.Fatal(err)
	}
	c := find(t, doctor.Run(t.Context(), e.cfg), "record_rights")
	if c.Status != "fail" || !strings.Contains(c.Message, creator+" via "+relay) {
		t.Errorf("record_rights with %s holding ADMIN on %s: %s %q, want a failure naming it", creator, relay, c.Status, c.Message)
	}
	// The creator may grant itself SET on the relay role, and then move the record.
	e.pg.Exec(t, creatorURL, "GRANT "+relay+" TO "+creator+" WITH SET TRUE; SET ROLE "+relay+
		"; SELECT public.walbox_slot_confirm('"+e.cfg.Slot+"', 1, '0/1', NULL)")
	setOnly := roleOf(t, e.roleURL(t, "LOGIN"))
	e.pg.Exec(t, e.db, "GRANT "+relay+" TO "+setOnly+" WITH INHERIT FALSE, SET TRUE")
	c = find(t, doctor.Run(t.Context(), e.cfg), "record_rights")
	if c.Status != "fail" || !strings.Contains(c.Message, setOnly+" via "+relay) {
		t.Errorf("record_rights with %s a member WITH INHERIT FALSE: %s %q, want a failure naming it", setOnly, c.Status, c.Message)
	}
}

// A role that may only CREATE in the outbox schema creates walbox's whole record there before the
// first migrate: walbox_migrations says it is applied, and walbox_slots and the record functions
// are that role's. migrate (as a superuser) refused nothing and recorded the relay role in it, and
// doctor took the role for the owner. Now migrate refuses, naming the role, and doctor fails.
func TestRecordCreatedByAnotherRoleIsRefused(t *testing.T) {
	e := setup(t)
	squatURL := e.roleURL(t, "LOGIN")
	squatter := roleOf(t, squatURL)
	relay := roleOf(t, e.roleURL(t, "LOGIN REPLICATION"))
	e.pg.Exec(t, e.db, "CREATE SCHEMA squat; GRANT USAGE, CREATE ON SCHEMA squat TO "+pgx.Identifier{squatter}.Sanitize())
	t.Cleanup(func() { e.pg.Exec(t, e.db, "DROP SCHEMA squat CASCADE") })
	if _, err := migrations.ApplyRegistryFor(t.Context(), e.pg.Conn(t, squatURL), "squat", ""); err != nil {
		t.Fatal(err)
	}
	table := outbox.Table{Schema: "squat", Name: "outbox"}
	_, err := migrations.Apply(t.Context(), e.conn, migrations.Config{Table: table, Publication: testenv.UniqueName("pub"), RelayRole: relay})
	if !errors.Is(err, migrations.ErrRecordOwner) || !strings.Contains(err.Error(), "walbox_slots belongs to "+squatter) {
		t.Errorf("migrate --relay-role %s over a record %s created: error %v, want a refusal naming it", relay, squatter, err)
	}
	cfg := e.cfg
	cfg.Table = table
	cfg.RelayRole = relay
	c := find(t, doctor.Run(t.Context(), cfg), "record_rights")
	if c.Status != "fail" || !strings.Contains(c.Message, "walbox_slots belongs to "+squatter) ||
		!strings.Contains(c.Fix, "give walbox_slots, walbox_relay_roles, walbox_migrations and the record functions in schema squat") {
		t.Errorf("record_rights over a record %s created: %s %q (fix %q), want a failure naming it", squatter, c.Status, c.Message, c.Fix)
	}
	// What doctor fails is real: the role rewrites a record function at will.
	e.pg.Exec(t, squatURL, "CREATE OR REPLACE FUNCTION squat.walbox_slot_stop(p_slot text, p_reason text, p_lsn pg_lsn) RETURNS text LANGUAGE sql AS 'SELECT NULL::text'")

	e.pg.Exec(t, e.db, "DROP SCHEMA squat CASCADE; CREATE SCHEMA squat")
	if _, err := migrations.Apply(t.Context(), e.conn, migrations.Config{Table: table, Publication: testenv.UniqueName("pub"), RelayRole: relay}); err != nil {
		t.Fatalf("migrate into a schema of its own: %v", err)
	}
	if c := find(t, doctor.Run(t.Context(), cfg), "record_rights"); c.Status != "pass" {
		t.Errorf("record_rights once the record is the table owner's: %s %q (fix %q), want pass", c.Status, c.Message, c.Fix)
	}
}

// Before PostgreSQL 16, a role with CREATEROLE may grant itself any role but a superuser: it makes
// itself a member of the relay role and moves the record. doctor passed it; now it fails it, and a
// member of such a role, naming the ALTER ROLE and the REVOKE that take the power away.
func TestRecordRightsSeeCreateRoleBefore16(t *testing.T) {
	e := setup(t)
	var version int
	if err := e.conn.QueryRow(t.Context(), "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version >= 160000 {
		t.Skip("PostgreSQL 16 and later limit CREATEROLE to the roles a role created (TestRecordRightsSeeMembershipOptions)")
	}
	relay := roleOf(t, e.roleURL(t, "LOGIN REPLICATION"))
	if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "public", relay); err != nil {
		t.Fatal(err)
	}
	creatorURL := e.roleURL(t, "LOGIN CREATEROLE")
	creator := roleOf(t, creatorURL)
	group := roleOf(t, e.roleURL(t, "NOLOGIN CREATEROLE"))
	member := roleOf(t, e.roleURL(t, "LOGIN NOINHERIT"))
	e.pg.Exec(t, e.db, "GRANT "+group+" TO "+member)
	c := find(t, doctor.Run(t.Context(), e.cfg), "record_rights")
	for _, want := range []string{creator + " (CREATEROLE)", member + " via " + group + " (CREATEROLE of " + group + ")"} {
		if c.Status != "fail" || !strings.Contains(c.Message, want) {
			t.Errorf("record_rights with %s CREATEROLE and %s a member of %s: %s %q, want a failure naming %q", creator, member, group, c.Status, c.Message, want)
		}
	}
	// What doctor fails is real: the role makes itself the relay role and moves the record.
	e.pg.Exec(t, creatorURL, "GRANT "+relay+" TO "+creator+"; SET ROLE "+relay+"; SELECT public.walbox_slot_confirm('"+e.cfg.Slot+"', 1, '0/1', NULL)")
	e.pg.Exec(t, e.db, "REVOKE "+relay+" FROM "+creator)
	e.applyFix(t, c, "ALTER ROLE "+creator+" NOCREATEROLE", "REVOKE "+group+" FROM "+member)
}

// Members of pg_execute_server_program run programs as the server's operating system user, and
// members of pg_write_server_files write its files: PostgreSQL warns that either can gain a
// superuser's access. doctor passed them; it fails each, directly a member or through a group.
func TestRecordRightsSeeServerFileRoles(t *testing.T) {
	e := setup(t)
	relay := roleOf(t, e.roleURL(t, "LOGIN REPLICATION"))
	if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "public", relay); err != nil {
		t.Fatal(err)
	}
	runnerURL := e.roleURL(t, "LOGIN")
	runner := roleOf(t, runnerURL)
	group, member := roleOf(t, e.roleURL(t, "NOLOGIN")), roleOf(t, e.roleURL(t, "LOGIN NOINHERIT"))
	e.pg.Exec(t, e.db, "GRANT pg_execute_server_program TO "+runner+"; GRANT pg_write_server_files TO "+group+"; GRANT "+group+" TO "+member)
	c := find(t, doctor.Run(t.Context(), e.cfg), "record_rights")
	for _, want := range []string{runner + " via pg_execute_server_program (pg_execute_server_program)", member + " via " + group + " (pg_write_server_files)"} {
		if c.Status != "fail" || !strings.Contains(c.Message, want) {
			t.Errorf("record_rights with server file roles: %s %q, want a failure naming %q", c.Status, c.Message, want)
		}
	}
	// What doctor fails is real: the role runs a program as the server's operating system user.
	e.pg.Exec(t, runnerURL, "CREATE TEMP TABLE ran (line text); COPY ran FROM PROGRAM 'id -un'")
	e.applyFix(t, c, "REVOKE pg_execute_server_program FROM "+runner, "REVOKE "+group+" FROM "+member)
}

// applyFix checks that c's fix has each of steps, runs them as the superuser, and checks that
// record_rights then passes.
func (e *env) applyFix(t *testing.T, c doctor.Check, steps ...string) {
	t.Helper()
	for _, step := range steps {
		if !strings.Contains(c.Fix, step) {
			t.Errorf("record_rights fix %q: want %q", c.Fix, step)
			continue
		}
		e.pg.Exec(t, e.db, step)
	}
	if c := find(t, doctor.Run(t.Context(), e.cfg), "record_rights"); c.Status != "pass" {
		t.Errorf("record_rights after %v: %s %q (fix %q), want pass", steps, c.Status, c.Message, c.Fix)
	}
}

// A role reaches pg_write_all_data through a group: the fix revokes the membership it holds, the
// group, and the group's in pg_write_all_data. Applied, doctor passes.
func TestRecordRightsFixRevokesTheMembershipsHeld(t *testing.T) {
	e := setup(t)
	relay := roleOf(t, e.roleURL(t, "LOGIN REPLICATION"))
	if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "public", relay); err != nil {
		t.Fatal(err)
	}
	group, member := roleOf(t, e.roleURL(t, "NOLOGIN")), roleOf(t, e.roleURL(t, "LOGIN NOINHERIT"))
	e.pg.Exec(t, e.db, "GRANT pg_write_all_data TO "+group+"; GRANT "+group+" TO "+member)
	c := find(t, doctor.Run(t.Context(), e.cfg), "record_rights")
	if c.Status != "fail" || !strings.Contains(c.Message, member+" via "+group) || !strings.Contains(c.Fix, "REVOKE "+group+" FROM "+member) {
		t.Fatalf("record_rights with %s a member of %s, a member of pg_write_all_data: %s %q (fix %q), want a failure naming %s via %s",
			member, group, c.Status, c.Message, c.Fix, member, group)
	}
	for _, step := range strings.Split(c.Fix, "; then ") {
		if strings.HasPrefix(step, "REVOKE ") {
			e.pg.Exec(t, e.db, step)
		}
	}
	if c := find(t, doctor.Run(t.Context(), e.cfg), "record_rights"); c.Status != "pass" {
		t.Errorf("record_rights after the fix's REVOKEs: %s %q (fix %q), want pass", c.Status, c.Message, c.Fix)
	}
}

// doctor judges every role against every right, within its time limit (Timeout) for all of its
// PostgreSQL checks. With 10,000 roles it gave up reading the rights (16 s here); it now judges
// only the roles that grants, owners and superusers reach, and still names a member of the
// relay role among them.
func TestRecordRightsWithTenThousandRoles(t *testing.T) {
	e := setup(t)
	relay := roleOf(t, e.roleURL(t, "LOGIN REPLICATION"))
	if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "public", relay); err != nil {
		t.Fatal(err)
	}
	prefix := testenv.UniqueName("many")
	batch := func(verb string, from int) string {
		return `DO $$ BEGIN FOR i IN ` + strconv.Itoa(from) + `..` + strconv.Itoa(from+999) +
			` LOOP EXECUTE pg_catalog.format('` + verb + ` ROLE ` + prefix + `_%s', i); END LOOP; END $$`
	}
	t.Cleanup(func() {
		for from := 1; from <= 10000; from += 1000 { // one transaction each: locks for 10,000 roles exceed the lock table
			e.pg.Exec(t, e.db, batch("DROP", from))
		}
	})
	for from := 1; from <= 10000; from += 1000 {
		e.pg.Exec(t, e.db, batch("CREATE", from))
	}
	member := prefix + "_5000"
	e.pg.Exec(t, e.db, "GRANT "+relay+" TO "+member)
	c := find(t, doctor.Run(t.Context(), e.cfg), "record_rights")
	if c.Status != "fail" || !strings.Contains(c.Message, member+" via "+relay) {
		t.Errorf("record_rights with 10,000 roles and %s a member of %s: %s %q, want a failure naming it", member, relay, c.Status, c.Message)
	}
}
