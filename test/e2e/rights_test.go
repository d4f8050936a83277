package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/internal/testenv"
)

// The record functions as the migrations before `--relay-role` left them: PUBLIC may execute.
const grantRecordToPublic = `GRANT EXECUTE ON FUNCTION walbox_slot_register(text, text, integer, text, pg_lsn, pg_lsn, xid8),
	walbox_slot_confirm(text, integer, pg_lsn, xid8), walbox_slot_coverage(text, text),
	walbox_slot_widen_coverage(text, text, text) TO PUBLIC`

// A database migrated before the record functions were restricted fails doctor, with the command
// that fixes it, until `walbox migrate` runs again; then it passes.
func TestDoctorFailsUntilMigrateRestrictsTheRecord(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	// The grants it changes are the server's to judge as a whole: on a shared, external server
	// other roles and databases' grants are not the test's.
	testenv.RequireOwn(t, pg)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	if c := w.doctor(nil).check(t, "record_rights"); c.Status != "pass" {
		t.Fatalf("record_rights after migrate: %s %q (fix %q), want pass", c.Status, c.Message, c.Fix)
	}
	pg.Exec(t, w.db, grantRecordToPublic)
	r := w.doctor(nil)
	// doctor runs as the owner, a superuser here: it names no relay role for walbox run.
	r.wantFail(t, "record_rights", "as the outbox table's owner: walbox migrate")
	if c := r.check(t, "record_rights"); !strings.Contains(c.Message, "PUBLIC may execute walbox_slot_confirm") {
		t.Errorf("record_rights: %q: want it to say PUBLIC may execute walbox_slot_confirm", c.Message)
	}
	if out, code := w.walbox(nil, "migrate"); code != 0 {
		t.Fatalf("walbox migrate exited %d:\n%s", code, out)
	}
	r = w.doctor(nil)
	if c := r.check(t, "record_rights"); c.Status != "pass" || r.code != 0 {
		t.Errorf("after walbox migrate: doctor exit %d, record_rights %s %q: want exit 0 and a pass", r.code, c.Status, c.Message)
	}
}

// `walbox run` as a role that may not execute the record functions stops at start, exit 1, with
// one line naming the command that fixes it; after that command it streams.
func TestRunRefusesARoleThatCannotWriteItsRecord(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	testenv.RequireOwn(t, pg) // the harness's server trusts local connections of any role
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	role := testenv.UniqueName("relay")
	relayURL := roleURL(t, pg, w.db, role, "LOGIN REPLICATION")
	out, code := w.walbox([]string{"WALBOX_DATABASE_URL=" + relayURL}, "run")
	want := "walbox migrate --relay-role " + role
	var lines []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "walbox run: ") {
			lines = append(lines, line)
		}
	}
	if code != 1 || len(lines) != 1 || !strings.Contains(lines[0], want) || !strings.Contains(lines[0], "walbox_slot_confirm") {
		t.Fatalf("exit %d, final lines %q: want exit 1 and one line naming walbox_slot_confirm and %q\n%s", code, lines, want, out)
	}

	if out, code := w.walbox(nil, "migrate", "--relay-role", role+"_absent"); code != 2 || !strings.Contains(out, "--relay-role (WALBOX_RELAY_ROLE): role") {
		t.Errorf("walbox migrate --relay-role naming no role: exit %d, want 2 naming --relay-role:\n%s", code, out)
	}
	if out, code := w.walbox(nil, "migrate", "--relay-role", role); code != 0 {
		t.Fatalf("walbox migrate --relay-role exited %d:\n%s", code, out)
	}
	r := w.startRelay("WALBOX_DATABASE_URL=" + relayURL)
	tx := w.insertTx(w.conn, 3, "order.created")
	waitForLSN(t, w, func(l pglogrepl.LSN) bool { return l > tx.before })
	if code := r.Stop(30 * time.Second); code != 0 {
		t.Fatalf("walbox run as %s exited %d after SIGTERM, want 0:\n%s", role, code, r.Output())
	}
}

// A relay role that may execute every record function but walbox_slot_stop (a database upgraded
// by a `walbox migrate` without --relay-role) is refused at start too: otherwise a stop it met
// would go unrecorded, and only a WARN would say so.
func TestRunRefusesARoleThatCannotRecordAStop(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	testenv.RequireOwn(t, pg)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	role := testenv.UniqueName("relay")
	relayURL := roleURL(t, pg, w.db, role, "LOGIN REPLICATION")
	if out, code := w.walbox(nil, "migrate", "--relay-role", role); code != 0 {
		t.Fatalf("walbox migrate --relay-role exited %d:\n%s", code, out)
	}
	if _, err := w.conn.Exec(context.Background(),
		"REVOKE EXECUTE ON FUNCTION walbox_slot_stop(text, text, pg_lsn) FROM "+role); err != nil {
		t.Fatal(err)
	}
	out, code := w.walbox([]string{"WALBOX_DATABASE_URL=" + relayURL}, "run")
	if code != 1 || !strings.Contains(out, "walbox_slot_stop") || !strings.Contains(out, "walbox migrate --relay-role "+role) {
		t.Fatalf("exit %d: want 1, naming walbox_slot_stop and walbox migrate --relay-role %s\n%s", code, role, out)
	}
}

// A role that may CREATE in the outbox schema made walbox's record before walbox migrate did, so
// walbox_slots and the record functions are its own (as if given them here). walbox run streamed
// on that record; now it stops at start, exit 1, naming the role, and so does migrate.
func TestRunRefusesARecordOfAnotherOwner(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	testenv.RequireOwn(t, pg)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	role := testenv.UniqueName("relay")
	relayURL := roleURL(t, pg, w.db, role, "LOGIN REPLICATION")
	if out, code := w.walbox(nil, "migrate", "--relay-role", role); code != 0 {
		t.Fatalf("walbox migrate --relay-role exited %d:\n%s", code, out)
	}
	squatter := testenv.UniqueName("squatter")
	roleURL(t, pg, w.db, squatter, "LOGIN")
	pg.Exec(t, w.db, `DO $$ DECLARE f regprocedure; BEGIN
		EXECUTE 'ALTER TABLE public.walbox_slots OWNER TO `+squatter+`';
		FOR f IN SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'walbox\_slot\_%' LOOP
			EXECUTE 'ALTER FUNCTION ' || f || ' OWNER TO `+squatter+`';
		END LOOP; END $$`)
	t.Cleanup(func() { pg.Exec(t, w.db, "REASSIGN OWNED BY "+squatter+" TO CURRENT_USER") })
	want := "public.walbox_slots belongs to " + squatter
	out, code := w.walbox([]string{"WALBOX_DATABASE_URL=" + relayURL}, "run")
	if code != 1 || !strings.Contains(out, want) {
		t.Errorf("walbox run over a record %s owns: exit %d, want 1 saying %q\n%s", squatter, code, want, out)
	}
	if out, code := w.walbox(nil, "migrate", "--relay-role", role); code != 1 || !strings.Contains(out, want) {
		t.Errorf("walbox migrate over a record %s owns: exit %d, want 1 saying %q\n%s", squatter, code, want, out)
	}
}

// `walbox migrate --relay-role` takes back the grants it may, and names the roles it may not: a
// member of the relay role can move the record as the relay can. migrate still succeeds; doctor,
// run as the owner, passes the relay role it recorded and fails the member, naming it.
func TestMigrateNamesTheRolesItCannotRestrict(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	testenv.RequireOwn(t, pg) // creates roles
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	relay, member := testenv.UniqueName("relay"), testenv.UniqueName("member")
	roleURL(t, pg, w.db, relay, "LOGIN REPLICATION")
	roleURL(t, pg, w.db, member, "LOGIN IN ROLE "+relay)
	out, code := w.walbox(nil, "migrate", "--relay-role", relay)
	if code != 0 || !strings.Contains(out, "warning: "+member+" may execute walbox_slot_confirm") ||
		!strings.Contains(out, "as a member of "+relay) {
		t.Errorf("walbox migrate --relay-role %s with a member %s: exit %d, want 0 and a warning naming the member:\n%s", relay, member, code, out)
	}
	r := w.doctor(nil)
	r.wantFail(t, "record_rights", "REVOKE "+relay+" FROM "+member)
	if c := r.check(t, "record_rights"); !strings.Contains(c.Message, member+" via "+relay) || strings.Contains(c.Message, "("+relay+")") {
		t.Errorf("record_rights: %q: want it to name %s via %s, and not %s alone", c.Message, member, relay, relay)
	}
	pg.Exec(t, w.db, "REVOKE "+relay+" FROM "+member)
	if r := w.doctor(nil); r.check(t, "record_rights").Status != "pass" || r.code != 0 {
		t.Errorf("after REVOKE: doctor exit %d, record_rights %+v: want a pass", r.code, r.check(t, "record_rights"))
	}
}
