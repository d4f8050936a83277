package doctor_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/doctor"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/registry"
)

// A role that may CREATE in the outbox schema adds overloads of the record functions that take
// text where walbox passes an integer. walbox must still call its own functions: the overloads
// would run with the relay's rights, and so could move the record for a role that may not.
func TestRecordCallsIgnoreOverloads(t *testing.T) {
	e := setup(t)
	attacker := pgx.Identifier{roleOf(t, e.roleURL(t, "LOGIN"))}.Sanitize()
	e.pg.Exec(t, e.db, "GRANT CREATE ON SCHEMA public TO "+attacker)
	e.pg.Exec(t, e.db, "SET ROLE "+attacker+`;
		CREATE FUNCTION public.walbox_slot_confirm(text, text, pg_lsn, xid8) RETURNS pg_lsn
			LANGUAGE sql AS $$ SELECT 'FF/FFFFFFFF'::pg_lsn $$;
		CREATE FUNCTION public.walbox_slot_register(text, text, text, text, pg_lsn, pg_lsn, xid8) RETURNS boolean
			LANGUAGE sql AS $$ SELECT true $$`)
	store := registry.New(e.pg.Conn(t, e.db), "public")
	ctx := t.Context()
	rec, ok, err := store.Get(ctx, e.cfg.Slot)
	if err != nil || !ok {
		t.Fatalf("record of slot %s: found %v, %v", e.cfg.Slot, ok, err)
	}
	if got, err := store.Confirm(ctx, e.cfg.Slot, 1, rec.ConfirmedLSN, 0); err != nil || got != rec.ConfirmedLSN {
		t.Errorf("Confirm(%s) = %s, %v: want %s from walbox's own function", rec.ConfirmedLSN, got, err, rec.ConfirmedLSN)
	}
	added, err := store.Register(ctx, registry.Record{Slot: "other", SystemID: "1", Timeline: 1, Origin: "created",
		ConfirmedLSN: pglogrepl.LSN(1)})
	if _, found, _ := store.Get(ctx, "other"); err != nil || !added || !found {
		t.Errorf("Register(other) = %v, %v, recorded %v: want walbox's own function to record it", added, err, found)
	}
}

// A relay role granted EXECUTE WITH GRANT OPTION fails doctor, and passed it on to another role.
// The owner's REVOKE does not reach a grant the relay made: `walbox migrate --relay-role` takes
// the option back with every grant made through it, and doctor passes.
func TestMigrateTakesBackGrantsMadeByTheRelay(t *testing.T) {
	e := setup(t)
	relay := roleOf(t, e.roleURL(t, "LOGIN REPLICATION"))
	attackerURL := e.roleURL(t, "LOGIN")
	attacker := roleOf(t, attackerURL)
	const confirm = "public.walbox_slot_confirm(text, integer, pg_lsn, xid8)"
	e.pg.Exec(t, e.db, "GRANT EXECUTE ON FUNCTION "+confirm+" TO "+pgx.Identifier{relay}.Sanitize()+" WITH GRANT OPTION")
	cfg := e.cfg
	cfg.RelayRole = relay
	if c := find(t, doctor.Run(t.Context(), cfg), "record_rights"); c.Status != "fail" ||
		!strings.Contains(c.Message, "may grant EXECUTE on walbox_slot_confirm ("+relay+")") {
		t.Errorf("record_rights with the relay's grant option: %s %q: want a failure naming %s", c.Status, c.Message, relay)
	}
	e.pg.Exec(t, e.db, "SET ROLE "+pgx.Identifier{relay}.Sanitize()+"; GRANT EXECUTE ON FUNCTION "+confirm+" TO "+
		pgx.Identifier{attacker}.Sanitize())
	if c := find(t, doctor.Run(t.Context(), cfg), "record_rights"); c.Status != "fail" || !strings.Contains(c.Message, attacker) {
		t.Errorf("record_rights with a grant made by the relay: %s %q: want a failure naming %s", c.Status, c.Message, attacker)
	}
	if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "public", relay); err != nil {
		t.Fatalf("migrate --relay-role %s: %v", relay, err)
	}
	_, err := e.pg.Conn(t, attackerURL).Exec(t.Context(), "SELECT "+strings.Replace(confirm, "(text, integer, pg_lsn, xid8)",
		"('"+e.cfg.Slot+"', 1, 'FF/FFFFFFFF', NULL)", 1))
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("walbox_slot_confirm as %s after migrate --relay-role %s: error %v, want permission denied", attacker, relay, err)
	}
	if c := find(t, doctor.Run(t.Context(), cfg), "record_rights"); c.Status != "pass" {
		t.Errorf("record_rights after migrate: %s %q, want pass", c.Status, c.Message)
	}
}

// Writing walbox_slots directly moves or deletes the record as surely as the functions do. An
// owner whose default privileges hand its new tables to an application role, and a grant made by
// hand, both give that away: doctor fails, and `walbox migrate` takes every write back.
func TestRecordTableWritesAreTheOwners(t *testing.T) {
	e := setup(t)
	appURL := e.roleURL(t, "LOGIN")
	app := pgx.Identifier{roleOf(t, appURL)}.Sanitize()
	e.pg.Exec(t, e.db, "GRANT UPDATE (confirmed_lsn) ON walbox_slots TO "+app+"; GRANT DELETE ON walbox_slots TO PUBLIC")
	c := find(t, doctor.Run(t.Context(), e.cfg), "record_rights")
	if c.Status != "fail" || !strings.Contains(c.Message, "may write walbox_slots (PUBLIC, "+roleOf(t, appURL)+")") {
		t.Errorf("record_rights with writes granted on walbox_slots: %s %q: want a failure naming PUBLIC and the role", c.Status, c.Message)
	}
	// A schema of its own, so that the owner's default privileges apply to a walbox_slots created now.
	e.pg.Exec(t, e.db, "CREATE SCHEMA fresh; ALTER DEFAULT PRIVILEGES IN SCHEMA fresh GRANT ALL ON TABLES TO "+app+
		"; GRANT USAGE ON SCHEMA fresh TO "+app)
	t.Cleanup(func() { e.pg.Exec(t, e.db, "ALTER DEFAULT PRIVILEGES IN SCHEMA fresh REVOKE ALL ON TABLES FROM "+app) })
	for _, schema := range []string{"public", "fresh"} {
		if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, schema, ""); err != nil {
			t.Fatalf("migrate the registry in %s: %v", schema, err)
		}
		e.pg.Exec(t, e.db, "INSERT INTO "+schema+".walbox_slots (slot_name, system_identifier, timeline, origin, confirmed_lsn) "+
			"VALUES ('probe', '1', 1, 'created', '0/1') ON CONFLICT DO NOTHING")
		app := e.pg.Conn(t, appURL)
		for _, q := range []string{"UPDATE " + schema + ".walbox_slots SET confirmed_lsn = 'FF/FFFFFFFF'",
			"DELETE FROM " + schema + ".walbox_slots", "TRUNCATE " + schema + ".walbox_slots"} {
			if _, err := app.Exec(t.Context(), q); err == nil || !strings.Contains(err.Error(), "permission denied") {
				t.Errorf("%s as an application role after migrate: error %v, want permission denied", q, err)
			}
		}
		var n int
		if err := app.QueryRow(t.Context(), "SELECT count(*) FROM "+schema+".walbox_slots").Scan(&n); err != nil {
			t.Errorf("read %s.walbox_slots as an application role: %v", schema, err)
		}
	}
	if c := find(t, doctor.Run(t.Context(), e.cfg), "record_rights"); c.Status != "pass" {
		t.Errorf("record_rights after migrate: %s %q, want pass", c.Status, c.Message)
	}
}

// A role that may CREATE in the outbox schema creates walbox_slots before the first migrate. The
// migrations would keep its table, and the record functions would write a table that role owns: a
// trigger of its own would run with the functions' owner's rights. migrate refuses; given the
// table after migrate, the role can move the record, and doctor fails.
func TestRecordTableOfAnotherOwnerFails(t *testing.T) {
	e := setup(t)
	squatter := roleOf(t, e.roleURL(t, "LOGIN"))
	e.pg.Exec(t, e.db, "CREATE SCHEMA squat; GRANT USAGE, CREATE ON SCHEMA squat TO "+pgx.Identifier{squatter}.Sanitize())
	e.pg.Exec(t, e.db, "SET ROLE "+pgx.Identifier{squatter}.Sanitize()+`; CREATE TABLE squat.walbox_slots (
		slot_name text PRIMARY KEY, system_identifier text NOT NULL, timeline integer NOT NULL, origin text NOT NULL,
		created_lsn pg_lsn, confirmed_lsn pg_lsn NOT NULL, confirmed_xmin xid8,
		confirmed_at timestamptz NOT NULL DEFAULT now(), first_recorded_at timestamptz NOT NULL DEFAULT now())`)
	// migrate refuses to create record functions, of the superuser, that write the squatter's table.
	_, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "squat", "")
	if !errors.Is(err, migrations.ErrRecordOwner) || !strings.Contains(err.Error(), "squat.walbox_slots belongs to "+squatter) {
		t.Fatalf("migrate the registry in squat: error %v, want a refusal naming %s", err, squatter)
	}
	// The same state, reached by giving the table to the squatter after migrate.
	e.pg.Exec(t, e.db, "ALTER TABLE squat.walbox_slots OWNER TO CURRENT_USER")
	if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "squat", ""); err != nil {
		t.Fatalf("migrate the registry in squat: %v", err)
	}
	e.pg.Exec(t, e.db, "ALTER TABLE squat.walbox_slots OWNER TO "+pgx.Identifier{squatter}.Sanitize())
	cfg := e.cfg
	cfg.Table.Schema = "squat"
	c := find(t, doctor.Run(t.Context(), cfg), "record_rights")
	if c.Status != "fail" || !strings.Contains(c.Message, "walbox_slots belongs to "+squatter) {
		t.Errorf("record_rights with walbox_slots owned by %s: %s %q, want a failure naming its owner", squatter, c.Status, c.Message)
	}
}

// An owner whose default privileges grant EXECUTE on its new functions to an application role
// runs `walbox migrate` without --relay-role: the record functions it creates are still only its
// own and the caller's.
func TestRecordFunctionsIgnoreDefaultPrivileges(t *testing.T) {
	e := setup(t)
	appURL := e.roleURL(t, "LOGIN")
	app := pgx.Identifier{roleOf(t, appURL)}.Sanitize()
	e.pg.Exec(t, e.db, "CREATE SCHEMA fresh; GRANT USAGE ON SCHEMA fresh TO "+app+
		"; ALTER DEFAULT PRIVILEGES IN SCHEMA fresh GRANT EXECUTE ON FUNCTIONS TO "+app)
	t.Cleanup(func() {
		e.pg.Exec(t, e.db, "ALTER DEFAULT PRIVILEGES IN SCHEMA fresh REVOKE ALL ON FUNCTIONS FROM "+app)
	})
	if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "fresh", ""); err != nil {
		t.Fatalf("migrate the registry in fresh: %v", err)
	}
	_, err := e.pg.Conn(t, appURL).Exec(t.Context(), "SELECT fresh.walbox_slot_confirm('walbox', 1, 'FF/FFFFFFFF', NULL)")
	if err == nil || !strings.Contains(err.Error(), "permission denied for function walbox_slot_confirm") {
		t.Errorf("walbox_slot_confirm as an application role after migrate: error %v, want permission denied", err)
	}
}
