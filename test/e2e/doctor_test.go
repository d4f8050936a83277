package e2e_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/testenv"
)

// doctorCheck is one check of `walbox doctor --json`.
type doctorCheck struct {
	Name, Status, Message, Fix string
}

type doctorReport struct {
	OK     bool
	Checks []doctorCheck
	out    string // the whole output, stderr included
	code   int
}

// doctor runs `walbox doctor --json` and decodes its report.
func (w *world) doctor(extraEnv []string, args ...string) doctorReport {
	w.t.Helper()
	out, code := w.walbox(extraEnv, append([]string{"doctor", "--json"}, args...)...)
	r := doctorReport{out: out, code: code}
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&r); err != nil {
		w.t.Fatalf("walbox doctor --json exited %d with no report: %v\n%s", code, err, out)
	}
	return r
}

func (r doctorReport) check(t *testing.T, name string) doctorCheck {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s check in:\n%s", name, r.out)
	return doctorCheck{}
}

// wantFail asserts that the check failed with a fix that mentions fixPart.
func (r doctorReport) wantFail(t *testing.T, name, fixPart string) {
	t.Helper()
	if r.code != 1 || r.OK {
		t.Errorf("exit %d, ok %t: want exit 1, not ok", r.code, r.OK)
	}
	c := r.check(t, name)
	if c.Status != "fail" || !strings.Contains(c.Fix, fixPart) {
		t.Errorf("%s: %s %q, fix %q: want fail with a fix about %q", name, c.Status, c.Message, c.Fix, fixPart)
	}
}

var doctorLine = regexp.MustCompile(`^(PASS|WARN|FAIL)  \S|^      fix: \S`)

func TestDoctorPassesOnAGoodSetup(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	out, code := w.walbox(nil, "doctor")
	if code != 0 {
		t.Fatalf("walbox doctor exited %d:\n%s", code, out)
	}
	t.Logf("walbox doctor:\n%s", out)
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if !doctorLine.MatchString(line) || strings.HasPrefix(line, "FAIL") {
			t.Errorf("line %q: want PASS or WARN lines, each perhaps followed by a fix", line)
		}
	}
	if !strings.Contains(out, "PASS  wal_level = logical\n") {
		t.Errorf("no PASS line for wal_level:\n%s", out)
	}

	r := w.doctor(nil)
	if r.code != 0 || !r.OK {
		t.Fatalf("doctor --json: exit %d, ok %t:\n%s", r.code, r.OK, r.out)
	}
	for _, name := range []string{"postgres", "wal_level", "max_replication_slots", "max_wal_senders", "role",
		"replication_connection", "publication", "publication_table", "outbox_table", "slot", "record_rights", "broker", "exchange"} {
		if c := r.check(t, name); c.Status != "pass" {
			t.Errorf("%s: %s %q (fix %q), want pass", name, c.Status, c.Message, c.Fix)
		}
	}
	// The harness's servers use defaults a production setup should not: they warn, with a fix.
	for _, name := range []string{"max_slot_wal_keep_size", "postgres_tls", "amqp_tls"} {
		if c := r.check(t, name); c.Status != "warn" || c.Fix == "" {
			t.Errorf("%s: %s %q (fix %q), want a warning with a fix", name, c.Status, c.Message, c.Fix)
		}
	}
}

func TestDoctorFailsOnWalLevelReplica(t *testing.T) {
	if testenv.Short() {
		t.Skip("end-to-end test: needs PostgreSQL and RabbitMQ")
	}
	pg := testenv.StartPostgres(t, testenv.WithSetting("wal_level", "replica"))
	testenv.RequireOwn(t, pg)
	db := pg.NewDatabase(t)
	w := &world{t: t, pg: pg, rabbit: testenv.SharedRabbit(t), db: db, conn: pg.Conn(t, db), bin: walboxBin(t),
		slot: testenv.UniqueName("slot"), exchange: testenv.UniqueName("ex"), queue: testenv.UniqueName("q")}
	// No slot can exist without wal_level = logical; the table and publication can.
	if out, code := w.walbox(nil, "migrate", "--no-slot"); code != 0 {
		t.Fatalf("walbox migrate --no-slot exited %d:\n%s", code, out)
	}
	out, code := w.walbox(nil, "doctor")
	if code != 1 {
		t.Fatalf("walbox doctor exited %d, want 1:\n%s", code, out)
	}
	want := "FAIL  wal_level = replica: logical decoding needs wal_level = logical\n" +
		"      fix: ALTER SYSTEM SET wal_level = logical (or set it in postgresql.conf), then restart PostgreSQL\n"
	if !strings.Contains(out, want) {
		t.Errorf("output lacks\n%s\nin:\n%s", want, out)
	}
	if !strings.Contains(out, "WARN  slot "+w.slot+" does not exist") {
		t.Errorf("no warning about the missing slot:\n%s", out)
	}
	if !strings.Contains(out, "walbox doctor: 1 of ") {
		t.Errorf("stderr does not count one failed check:\n%s", out)
	}
}

func TestDoctorFindsMisconfiguration(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	w := newWorld(t, pg, testenv.SharedRabbit(t))

	t.Run("missing publication", func(t *testing.T) {
		r := w.doctor(nil, "--publication", "no_such_publication")
		r.wantFail(t, "publication", "CREATE PUBLICATION no_such_publication FOR TABLE")
		if c := r.check(t, "wal_level"); c.Status != "pass" {
			t.Errorf("wal_level: %s, want pass", c.Status)
		}
	})

	t.Run("publication that also publishes deletes warns", func(t *testing.T) {
		pg.Exec(t, w.db, "CREATE PUBLICATION all_ops FOR TABLE outbox")
		r := w.doctor(nil, "--publication", "all_ops")
		if r.code != 0 || !r.OK {
			t.Errorf("exit %d, ok %t: want 0 and ok, warnings do not fail\n%s", r.code, r.OK, r.out)
		}
		c := r.check(t, "publication")
		if c.Status != "warn" || !strings.Contains(c.Message, "update, delete, truncate") ||
			c.Fix != "ALTER PUBLICATION all_ops SET (publish = 'insert')" {
			t.Errorf("publication: %s %q, fix %q: want a warning naming the other operations", c.Status, c.Message, c.Fix)
		}
	})

	t.Run("role without REPLICATION", func(t *testing.T) {
		testenv.RequireOwn(t, pg) // the harness's server trusts local connections of any role
		role := testenv.UniqueName("norepl")
		dbURL := roleURL(t, pg, w.db, role, "LOGIN")
		pg.Exec(t, w.db, "GRANT SELECT ON outbox TO "+pgx.Identifier{role}.Sanitize())
		r := w.doctor([]string{"WALBOX_DATABASE_URL=" + dbURL})
		r.wantFail(t, "role", "ALTER ROLE "+role+" REPLICATION")
		r.wantFail(t, "replication_connection", "ALTER ROLE "+role+" REPLICATION")
		for _, name := range []string{"wal_level", "publication", "outbox_table", "slot", "broker"} {
			if c := r.check(t, name); c.Status != "pass" {
				t.Errorf("%s: %s %q, want pass", name, c.Status, c.Message)
			}
		}
	})

	t.Run("least-privilege relay role passes where run streams", func(t *testing.T) {
		testenv.RequireOwn(t, pg)
		role := testenv.UniqueName("relay")
		dbURL := roleURL(t, pg, w.db, role, "LOGIN REPLICATION") // no SELECT on the outbox
		if out, code := w.walbox(nil, "migrate", "--relay-role", role); code != 0 {
			t.Fatalf("walbox migrate --relay-role exited %d:\n%s", code, out)
		}
		r := w.doctor([]string{"WALBOX_DATABASE_URL=" + dbURL})
		if r.code != 0 || !r.OK {
			t.Errorf("exit %d, ok %t: want 0 and ok, as for a superuser (internal/doctor's test streams with such a role)\n%s", r.code, r.OK, r.out)
		}
		for _, name := range []string{"role", "replication_connection", "publication", "publication_table", "outbox_table", "slot", "slot_record", "record_rights"} {
			if c := r.check(t, name); c.Status != "pass" {
				t.Errorf("%s: %s %q (fix %q), want pass", name, c.Status, c.Message, c.Fix)
			}
		}
	})

	t.Run("exchange of another type", func(t *testing.T) {
		ex := testenv.UniqueName("fanout")
		conn, ch := w.amqp()
		if err := ch.ExchangeDeclare(ex, "fanout", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		r := w.doctor([]string{"WALBOX_EXCHANGE=" + ex})
		r.wantFail(t, "exchange", "delete the exchange")
		if c := r.check(t, "broker"); c.Status != "pass" {
			t.Errorf("broker: %s %q, want pass: the broker was reached", c.Status, c.Message)
		}
	})

	t.Run("unreachable broker", func(t *testing.T) {
		const password = "Doctor-pw-6029-secret"
		r := w.doctor([]string{fmt.Sprintf("WALBOX_AMQP_URL=amqp://walbox:%s@127.0.0.1:%d/", password, closedPort(t))})
		r.wantFail(t, "broker", "host and port")
		if strings.Contains(r.out, password) {
			t.Errorf("the output shows the password:\n%s", r.out)
		}
		if c := r.check(t, "slot"); c.Status != "pass" {
			t.Errorf("slot: %s %q, want pass: PostgreSQL is fine", c.Status, c.Message)
		}
	})
}

// roleURL creates role with attrs in the database at db (dropped with the test) and returns db's
// URL for that role.
func roleURL(t *testing.T, pg *testenv.Postgres, db, role, attrs string) string {
	t.Helper()
	ident := pgx.Identifier{role}.Sanitize()
	pg.Exec(t, db, "CREATE ROLE "+ident+" "+attrs)
	t.Cleanup(func() {
		pg.Exec(t, db, "DROP OWNED BY "+ident)
		pg.Exec(t, db, "DROP ROLE "+ident)
	})
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

// closedPort returns a local port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// With several endpoints, doctor tries each: a node down is a warning naming it, as long as
// another answers; all of them down fail. No password of any URL is shown.
func TestDoctorChecksEveryEndpoint(t *testing.T) {
	rabbit := testenv.SharedRabbit(t)
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	dead := testenv.FreeAddr(t)
	down := "amqp://guest:down-node-pw@" + dead + "/"

	r := w.doctor([]string{"WALBOX_AMQP_URL=" + down + "," + rabbit.URL()})
	if r.code != 0 || !r.OK {
		t.Fatalf("one node of two down: exit %d, ok %t, want 0:\n%s", r.code, r.OK, r.out)
	}
	live, err := url.Parse(rabbit.URL())
	if err != nil {
		t.Fatal(err)
	}
	var warned, passed bool
	for _, c := range r.Checks {
		if c.Name != "broker" {
			continue
		}
		warned = warned || (c.Status == "warn" && strings.Contains(c.Message, dead))
		passed = passed || (c.Status == "pass" && strings.Contains(c.Message, live.Host))
	}
	if !warned || !passed {
		t.Errorf("want a broker warning naming %s and a pass naming the live node:\n%s", dead, r.out)
	}
	if c := r.check(t, "exchange"); c.Status != "pass" {
		t.Errorf("exchange: %s %q, want pass through the live node", c.Status, c.Message)
	}

	r = w.doctor([]string{"WALBOX_AMQP_URL=" + down + "," + down})
	if r.code != 1 || r.OK {
		t.Errorf("every node down: exit %d, ok %t, want 1:\n%s", r.code, r.OK, r.out)
	}
	if strings.Contains(r.out, "down-node-pw") {
		t.Errorf("output shows a password:\n%s", r.out)
	}
}
