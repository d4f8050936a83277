package faults_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/test/checker"
)

// The passwords share a marker no output may contain, in any encoding of them.
const (
	secretMarker = "s3cr3t"
	dbPassword   = "Zx9-s3cr3t@pw/42" // '@' and '/' need escaping in a URL
	mqPassword   = "Mq7-s3cr3t-amqp"
	wrongDB      = "Wr0ng-s3cr3t-db"
)

// enablePasswords makes every TCP login but the superuser's use SCRAM passwords. testenv runs
// initdb with trust authentication and has no option for pg_hba.conf, so the file is rewritten in
// the data directory and the server reloaded.
func enablePasswords(t *testing.T, pg *testenv.Postgres) {
	t.Helper()
	hba := filepath.Join(pg.Dir(), "data", "pg_hba.conf")
	conf := "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(hba, []byte(conf), 0o600); err != nil { // keeps the file's owner
		t.Fatal(err)
	}
	pg.Exec(t, pg.URL(), "SELECT pg_reload_conf()")
	time.Sleep(300 * time.Millisecond) // the postmaster rereads pg_hba.conf asynchronously
}

// No password appears in walbox's logs, errors or `walbox status` output, whether the database
// URL carries it as URL userinfo, as a password= keyword or as a ?password= parameter, and
// whether the connection works, is refused, or cannot even be parsed.
func TestPasswordsNeverShown(t *testing.T) {
	heavy(t)
	pg := testenv.StartPostgres(t, testenv.WithSetting("password_encryption", "scram-sha-256"))
	testenv.RequireOwn(t, pg)
	rabbit := testenv.SharedRabbit(t)
	testenv.RequireOwn(t, rabbit) // adds a user to it
	enablePasswords(t, pg)
	pg.Exec(t, pg.URL(), "CREATE ROLE walbox_relay LOGIN REPLICATION PASSWORD '"+dbPassword+"'")
	mqUser := testenv.UniqueName("walbox_mq")
	rabbit.Ctl(t, "add_user", mqUser, mqPassword)
	rabbit.Ctl(t, "set_permissions", "-p", "/", mqUser, ".*", ".*", ".*")
	t.Cleanup(func() { rabbit.Ctl(t, "delete_user", mqUser) })

	w := newWorld(t, pg, rabbit)
	if out, code := w.walbox(nil, "migrate", "--relay-role", "walbox_relay"); code != 0 {
		t.Fatalf("walbox migrate --relay-role walbox_relay exited %d:\n%s", code, out)
	}
	u, err := url.Parse(w.db)
	if err != nil {
		t.Fatal(err)
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	host, port := u.Hostname(), u.Port()
	mqURL := strings.Replace(rabbit.URL(), "guest:guest@", mqUser+":"+mqPassword+"@", 1)
	forms := []struct {
		name, dsn, wrong string
		broken           []string // connection strings that cannot be used as written
	}{
		{
			name:  "URL userinfo",
			dsn:   fmt.Sprintf("postgres://walbox_relay:%s@%s:%s/%s?sslmode=disable", url.QueryEscape(dbPassword), host, port, dbName),
			wrong: fmt.Sprintf("postgres://walbox_relay:%s@%s:%s/%s?sslmode=disable", wrongDB, host, port, dbName),
			broken: []string{
				fmt.Sprintf("postgres://walbox_relay:%s@%s:99999999/%s", url.QueryEscape(dbPassword), host, dbName),
				// A password with an '@' left unescaped: parsers disagree on where it ends.
				fmt.Sprintf("postgres://walbox_relay:%s@%s:%s/%s", strings.Replace(dbPassword, "s3cr3t", "@s3cr3t", 1), host, port, dbName),
			},
		},
		{
			name:   "password keyword",
			dsn:    fmt.Sprintf("host=%s port=%s user=walbox_relay password='%s' dbname=%s sslmode=disable", host, port, dbPassword, dbName),
			wrong:  fmt.Sprintf("host=%s port=%s user=walbox_relay password=%s dbname=%s sslmode=disable", host, port, wrongDB, dbName),
			broken: []string{fmt.Sprintf("host=%s port=%s user=walbox_relay password='%s dbname=%s", host, port, dbPassword, dbName)},
		},
		{
			name:   "password query parameter",
			dsn:    fmt.Sprintf("postgres://walbox_relay@%s:%s/%s?sslmode=disable&password=%s", host, port, dbName, url.QueryEscape(dbPassword)),
			wrong:  fmt.Sprintf("postgres://walbox_relay@%s:%s/%s?sslmode=disable&password=%s", host, port, dbName, wrongDB),
			broken: []string{fmt.Sprintf("postgres://walbox_relay@%s:notaport/%s?password=%s", host, dbName, url.QueryEscape(dbPassword))},
		},
	}
	checked := 0
	for _, f := range forms {
		// check fails t if out shows a password.
		check := func(t *testing.T, what, out string) {
			t.Helper()
			checked++
			if strings.Contains(out, secretMarker) {
				t.Errorf("%s shows a password:\n%s", what, out)
			}
		}
		env := []string{"WALBOX_DATABASE_URL=" + f.dsn, "WALBOX_AMQP_URL=" + mqURL, "WALBOX_LOG_LEVEL=debug"}
		t.Run(f.name+"/status", func(t *testing.T) {
			w := w.in(t)
			out, code := w.walbox(env, "status")
			check(t, "walbox status", out)
			if code != 0 {
				t.Errorf("walbox status with the %s form exited %d:\n%s", f.name, code, out)
			}
			out, _ = w.walbox(env, "status", "--json")
			check(t, "walbox status --json", out)
		})
		// A running relay, its endpoints, and the errors of a session cut by the server and of a
		// broker that cannot be reached.
		t.Run(f.name+"/running relay", func(t *testing.T) {
			w := w.in(t)
			p := newProxy(t, hostOf(t, rabbit.URL()))
			r := w.startRelay(append(env, "WALBOX_AMQP_URL="+withHost(t, mqURL, p.addr))...)
			defer func() { check(t, "walbox run (logs and exit)", r.Output()) }()
			r.waitState("streaming", time.Minute)
			pg.Exec(t, pg.URL(), "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1", w.slot)
			p.down()
			waitFor(t, 30*time.Second, "the relay to record an error", func() bool {
				st, err := r.status()
				return err == nil && st.LastError != ""
			})
			for _, path := range []string{"/status", "/metrics"} {
				check(t, "GET "+path, httpGet(t, "http://"+r.addr+path))
			}
			out, _ := w.walbox(append(env, "WALBOX_RELAY_URL=http://"+r.addr), "status")
			check(t, "walbox status with the relay's state", out)
			r.Stop(30 * time.Second)
		})
		t.Run(f.name+"/refused", func(t *testing.T) {
			w := w.in(t)
			bad := []string{"WALBOX_DATABASE_URL=" + f.wrong}
			out, code := w.walbox(bad, "status")
			check(t, "walbox status with a wrong password", out)
			if code == 0 {
				t.Errorf("walbox status with a wrong password exited 0:\n%s", out)
			}
			out, code = w.walbox(append(env, bad...), "run")
			check(t, "walbox run with a wrong password", out)
			if code == 0 {
				t.Errorf("walbox run with a wrong password exited 0:\n%s", out)
			}
			// Refused by privileges: migrate as the relay's role.
			out, _ = w.walbox(env, "migrate")
			check(t, "walbox migrate as a role that may not create tables", out)
		})
		t.Run(f.name+"/unusable as written", func(t *testing.T) {
			w := w.in(t)
			for _, broken := range f.broken {
				for _, cmd := range []string{"status", "run", "migrate"} {
					out, code := w.walbox(append(env, "WALBOX_DATABASE_URL="+broken), cmd)
					check(t, "walbox "+cmd+" with a malformed connection string", out)
					if code == 0 {
						t.Errorf("walbox %s with a malformed connection string exited 0:\n%s", cmd, out)
					}
				}
			}
		})
	}
	t.Logf("SUMMARY %s dsn_forms=%d outputs_checked=%d", t.Name(), len(forms), checked)
}

func httpGet(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// The relay runs as a role with LOGIN REPLICATION and nothing else: no superuser, no privilege on
// the outbox table. The table and the publication come from `walbox migrate` run by the table's
// owner, also no superuser (with --no-slot: creating a slot needs REPLICATION, which the owner
// lacks); the relay creates the slot at its first start.
func TestLeastPrivilege(t *testing.T) {
	heavy(t)
	pg := testenv.StartPostgres(t)
	testenv.RequireOwn(t, pg)
	leastPrivilege(t, pg, testenv.SharedRabbit(t))
}

// leastPrivilege creates the roles app_owner and walbox_relay on pg (a server of the test's own:
// roles belong to the whole server) and relays as walbox_relay.
func leastPrivilege(t *testing.T, pg *testenv.Postgres, rabbit *testenv.Rabbit) {
	db := testenv.UniqueName("app")
	pg.Exec(t, pg.URL(), "CREATE ROLE app_owner LOGIN")
	pg.Exec(t, pg.URL(), "CREATE ROLE walbox_relay LOGIN REPLICATION")
	pg.Exec(t, pg.URL(), "CREATE ROLE app_reader LOGIN") // any other role: no grants at all
	pg.Exec(t, pg.URL(), "CREATE DATABASE "+db+" OWNER app_owner")
	asRole := func(role string) string {
		u, err := url.Parse(pg.URL())
		if err != nil {
			t.Fatal(err)
		}
		u.User, u.Path = url.User(role), "/"+db
		return u.String()
	}
	owner, relayRole := asRole("app_owner"), asRole("walbox_relay")

	w := &world{t: t, pg: pg, rabbit: rabbit, db: owner, relayDB: relayRole, relayMQ: rabbit.URL(),
		slot: testenv.UniqueName("slot"), exchange: testenv.UniqueName("ex"), queue: testenv.UniqueName("q"), binding: "#"}
	w.conn = pg.Conn(t, owner)
	out, code := w.walbox([]string{"WALBOX_DATABASE_URL=" + owner}, "migrate", "--no-slot", "--relay-role", "walbox_relay")
	if code != 0 {
		t.Fatalf("walbox migrate --no-slot --relay-role walbox_relay as the table owner exited %d:\n%s", code, out)
	}
	w.declare()
	recordIsWalboxs(t, pg, asRole("app_reader"))
	// doctor run by the owner, no superuser, accepts the relay role migrate recorded (it used to
	// fail it, and suggest --relay-role app_owner).
	if out, _ := w.walbox([]string{"WALBOX_DATABASE_URL=" + owner}, "doctor"); !strings.Contains(out,
		"PASS  only the owner and walbox_relay may move walbox's record") {
		t.Errorf("walbox doctor as app_owner: want a pass for record_rights naming walbox_relay:\n%s", out)
	}
	var super, replication, canRead bool
	if err := w.conn.QueryRow(context.Background(), `SELECT rolsuper, rolreplication,
		has_table_privilege('walbox_relay', 'public.outbox', 'SELECT')
		FROM pg_roles WHERE rolname = 'walbox_relay'`).Scan(&super, &replication, &canRead); err != nil {
		t.Fatal(err)
	}
	if super || !replication || canRead {
		t.Fatalf("walbox_relay: superuser %t, replication %t, may read the outbox %t; want false, true, false", super, replication, canRead)
	}

	v := w.startVerifier()
	r := w.startRelay()
	r.waitState("streaming", time.Minute)
	cw := w.newWriter(checker.WriterConfig{Seed: 81, MaxRows: 1000})
	if err := cw.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out, code := w.walbox(nil, "status"); code != 0 {
		t.Errorf("walbox status as walbox_relay exited %d:\n%s", code, out)
	}
	if out, code := w.walbox(nil, "doctor"); code != 0 || strings.Contains(out, "FAIL") {
		t.Errorf("walbox doctor as walbox_relay exited %d, want 0 and no failed check:\n%s", code, out)
	}
	w.verdict(cw, v, time.Minute, 1, 0, "relay_role=LOGIN_REPLICATION_only migrate_role=table_owner")
	if !strings.Contains(r.Output(), "created the missing replication slot") {
		t.Errorf("the relay did not say it created the slot:\n%s", testenv.Tail(r.Output(), 20))
	}
	// The relay recorded its positions through the functions only it and the owner may execute.
	var recorded, created, flushed string
	var ok bool
	if err := w.conn.QueryRow(context.Background(), `SELECT r.confirmed_lsn::text, r.created_lsn::text, s.confirmed_flush_lsn::text,
			r.confirmed_lsn > r.created_lsn AND r.confirmed_lsn >= s.confirmed_flush_lsn
		FROM walbox_slots r JOIN pg_replication_slots s USING (slot_name) WHERE r.slot_name = $1`, w.slot).Scan(
		&recorded, &created, &flushed, &ok); err != nil {
		t.Fatalf("read the record of slot %s: %v", w.slot, err)
	}
	if !ok {
		t.Errorf("record of slot %s at %s (created %s), slot at %s: want the record moved past its start and not behind the slot",
			w.slot, recorded, created, flushed)
	}
	out, code = w.walbox(nil, "doctor")
	if code != 0 || !strings.Contains(out, "PASS  only the owner and walbox_relay may move walbox's record") {
		t.Errorf("walbox doctor as walbox_relay exited %d; want 0 and a pass for record_rights:\n%s", code, out)
	}
	r.Stop(30 * time.Second)
}

// recordIsWalboxs checks that a role with no grants may read walbox's record but gets "permission
// denied" for each function that moves it.
func recordIsWalboxs(t *testing.T, pg *testenv.Postgres, dbURL string) {
	t.Helper()
	conn := pg.Conn(t, dbURL)
	ctx := context.Background()
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM walbox_slots").Scan(&n); err != nil {
		t.Errorf("a role with no grants cannot read walbox_slots: %v", err)
	}
	for fn, call := range map[string]string{
		"walbox_slot_register":       "SELECT walbox_slot_register('walbox', '1', 1, 'created', NULL, 'FF/FFFFFFFF', NULL)",
		"walbox_slot_confirm":        "SELECT walbox_slot_confirm('walbox', 1, 'FF/FFFFFFFF', NULL)",
		"walbox_slot_coverage":       "SELECT walbox_slot_coverage('walbox', 'x')",
		"walbox_slot_widen_coverage": "SELECT walbox_slot_widen_coverage('walbox', 'x', 'y')",
	} {
		_, err := conn.Exec(ctx, call)
		if err == nil || !strings.Contains(err.Error(), "permission denied for function "+fn) {
			t.Errorf("%s as a role with no grants: error %v, want permission denied for function %s", call, err, fn)
		}
	}
}
