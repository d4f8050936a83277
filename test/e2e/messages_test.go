package e2e_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
)

// oneLine fails unless out is a single line that contains every part.
func oneLine(t *testing.T, out string, parts ...string) {
	t.Helper()
	if lines := strings.Split(strings.TrimRight(out, "\n"), "\n"); len(lines) != 1 {
		t.Errorf("%d lines, want one:\n%s", len(lines), out)
	}
	for _, p := range parts {
		if !strings.Contains(out, p) {
			t.Errorf("output does not say %q:\n%s", p, out)
		}
	}
}

// wantExit fails unless the command exited with code want.
func wantExit(t *testing.T, code, want int, out string) {
	t.Helper()
	if code != want {
		t.Fatalf("exit %d, want %d:\n%s", code, want, out)
	}
}

// TestOperatorMessages runs walbox into the mistakes an operator makes first and checks that each
// answer is one line with the cause, the fix and the exit code the README states.
func TestOperatorMessages(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	rabbit := testenv.SharedRabbit(t)

	t.Run("malformed database url", func(t *testing.T) {
		w := newWorld(t, pg, rabbit)
		addr := testenv.FreeAddr(t)
		out, code := w.walbox([]string{"WALBOX_DATABASE_URL=postgres://walbox@localhost:notaport/app", "WALBOX_LISTEN=" + addr}, "run")
		wantExit(t, code, 2, out)
		oneLine(t, out, "--database-url", "invalid port")
	})
	t.Run("unknown flag", func(t *testing.T) {
		w := newWorld(t, pg, rabbit)
		out, code := w.walbox(nil, "run", "--windw", "8")
		wantExit(t, code, 2, out)
		oneLine(t, out, "unknown flag --windw", "did you mean --window?", "walbox run --help")
	})
	t.Run("mistyped keys in the config file", func(t *testing.T) {
		w := newWorld(t, pg, rabbit)
		dir := t.TempDir()
		for name, c := range map[string]struct{ yaml, want1, want2 string }{
			"table.yaml": {"tables:\n  - table: public.outbox\n    evnet-type: kind\n",
				`unknown key "evnet-type" in tables[0]`, `did you mean "event-type"?`},
			"top.yaml": {"windw: 8\n", `unknown setting "windw"`, `did you mean "window"?`},
		} {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			out, code := w.walbox([]string{"WALBOX_CONFIG=" + path}, "run")
			wantExit(t, code, 2, out)
			oneLine(t, out, c.want1, c.want2)
		}
	})
	t.Run("missing table", func(t *testing.T) {
		w := newWorld(t, pg, rabbit)
		out, code := w.walbox([]string{"WALBOX_TABLE=public.nosuch"}, "run")
		wantExit(t, code, 1, out)
		if !strings.Contains(out, "public.nosuch does not exist") || strings.Contains(out, "ADD TABLE") {
			t.Errorf("want the table named as missing, not a publication fix:\n%s", out)
		}
	})
	t.Run("exchange with other arguments", func(t *testing.T) {
		w := newWorld(t, pg, rabbit)
		conn, ch := w.amqp()
		defer conn.Close()
		other := testenv.UniqueName("ex")
		if err := ch.ExchangeDeclare(other, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		out, code := w.walbox([]string{"WALBOX_EXCHANGE=" + other}, "run")
		wantExit(t, code, 1, out)
		if !strings.Contains(out, "exists with other settings") || strings.Contains(out, "never reached") {
			t.Errorf("want the declare named, without 'never reached':\n%s", out)
		}
	})
	t.Run("durations in logs", func(t *testing.T) {
		w := newWorld(t, pg, rabbit)
		relay := w.startRelay("WALBOX_LOG_FORMAT=json", "WALBOX_WAIT_FOR_SERVERS=true",
			fmt.Sprintf("WALBOX_AMQP_URL=amqp://guest:guest@127.0.0.1:%d/", closedPort(t)))
		readable := regexp.MustCompile(`"retry_in":"[0-9.]+(ms|s)"`)
		relay.WaitFor("a retry logged", time.Minute, func() bool { return strings.Contains(relay.Output(), `"retry_in"`) })
		if !readable.MatchString(relay.Output()) {
			t.Errorf("retry_in is not a readable duration:\n%s", relay.Output())
		}
	})
}

// TestMigrateChecksWalLevelFirst: on a server without logical decoding, migrate changes nothing
// and names the fix.
func TestMigrateChecksWalLevelFirst(t *testing.T) {
	replica := testenv.StartPostgres(t, testenv.WithSetting("wal_level", "replica"))
	testenv.RequireOwn(t, replica)
	db := replica.NewDatabase(t)
	w := &world{t: t, bin: walboxBin(t), rabbit: testenv.SharedRabbit(t), db: db, slot: "walbox"}
	out, code := w.walbox(nil, "migrate")
	wantExit(t, code, 1, out)
	oneLine(t, out, "wal_level is replica", "ALTER SYSTEM SET wal_level = logical", "restart")
	var exists bool
	if err := replica.Conn(t, db).QueryRow(context.Background(), `SELECT to_regclass('public.outbox') IS NOT NULL`).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("migrate created the outbox table before it found wal_level wrong")
	}
}

// passwordAuth makes pg ask every role but postgres for its password (scram-sha-256).
func passwordAuth(t *testing.T, pg *testenv.Postgres) {
	t.Helper()
	hba := []string{
		"local all postgres trust", "host all postgres 127.0.0.1/32 trust", "host replication postgres 127.0.0.1/32 trust",
		"host all all 127.0.0.1/32 scram-sha-256", "host replication all 127.0.0.1/32 scram-sha-256",
	}
	var file string
	conn := pg.Conn(t, pg.URL())
	if err := conn.QueryRow(t.Context(), "SHOW hba_file").Scan(&file); err != nil {
		t.Fatal(err)
	}
	lines := "'" + strings.Join(hba, "', '") + "'"
	pg.Exec(t, pg.URL(), "COPY (SELECT unnest(ARRAY["+lines+"])) TO "+pgLiteral(file))
	pg.Exec(t, pg.URL(), "SELECT pg_reload_conf()")
}

func pgLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// A wrong password is reported as a refused login, naming the user and the setting, whatever
// TLS attempt came first (sslmode=prefer against a server without TLS).
func TestWrongDatabasePasswordSaysSo(t *testing.T) {
	pg := testenv.StartPostgres(t)
	testenv.RequireOwn(t, pg)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	passwordAuth(t, pg)
	roleURL(t, pg, w.db, "relayer", "LOGIN REPLICATION PASSWORD 'right-password'")
	u, err := url.Parse(strings.Replace(w.db, "sslmode=disable", "sslmode=prefer", 1))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("relayer", "wrong-password")
	for _, cmd := range []string{"status", "run"} {
		out, code := w.walbox([]string{"WALBOX_DATABASE_URL=" + u.String()}, cmd)
		wantExit(t, code, 1, out)
		if cmd == "run" { // after the relay's log lines
			out = out[strings.LastIndex(strings.TrimRight(out, "\n"), "\n")+1:]
		}
		oneLine(t, out, "authentication failed", "28P01", `user "relayer"`, "--database-password")
		if strings.Contains(out, "tls error") || strings.Contains(out, "never reached") || strings.Contains(out, "wrong-password") {
			t.Errorf("walbox %s blames TLS or the address, or shows the password:\n%s", cmd, out)
		}
	}
}

// TestStatusChecksSettingsFirst: status refuses a --relay-url it could never read and a
// --require-relay that is not a bool with exit 2, as every bad setting, instead of reporting
// the relay as unreachable or ignoring the setting.
func TestStatusChecksSettingsFirst(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"WALBOX_RELAY_URL=127.0.0.1:9187"}, nil, "--relay-url"},
		{[]string{"WALBOX_RELAY_URL=://x"}, nil, "--relay-url"},
		{nil, []string{"--require-relay=maybe"}, "--require-relay"},
	} {
		out, code := w.walbox(c.env, append([]string{"status"}, c.args...)...)
		wantExit(t, code, 2, out)
		oneLine(t, out, c.want)
	}
}

// TestRunChecksListenFirst: a malformed --listen is a bad setting (exit 2), found before the
// relay connects to anything, not an ERROR line while the relay runs without its endpoints.
func TestRunChecksListenFirst(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	for _, addr := range []string{"notanaddr", "127.0.0.1:99999"} {
		out, code := w.walbox([]string{"WALBOX_LISTEN=" + addr,
			fmt.Sprintf("WALBOX_DATABASE_URL=postgres://walbox@127.0.0.1:%d/app", closedPort(t))}, "run")
		wantExit(t, code, 2, out)
		oneLine(t, out, "--listen", "host:port")
	}
}

// TestBrokerURLAtAnotherServer: a broker URL that reaches a server that does not speak AMQP
// (PostgreSQL's port here) reached no broker, so the error keeps "never reached" and its advice;
// a broker that refused the login was reached.
func TestBrokerURLAtAnotherServer(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	out, code := w.walbox([]string{fmt.Sprintf("WALBOX_AMQP_URL=amqp://guest:guest@127.0.0.1:%d/", pg.Port())}, "run")
	wantExit(t, code, 1, out)
	last := out[strings.LastIndex(strings.TrimRight(out, "\n"), "\n")+1:]
	oneLine(t, last, "connect to broker", "never reached since start; check the URL")

	// A broker that refuses the login was reached: no advice about its address.
	u, err := url.Parse(w.rabbit.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "wrong-password")
	out, code = w.walbox([]string{"WALBOX_AMQP_URL=" + u.String()}, "run")
	wantExit(t, code, 1, out)
	if strings.Contains(out, "never reached") {
		t.Errorf("a broker that refused the login is said to be never reached:\n%s", out)
	}
}

// TestUnknownCommandIsOneLine: a mistyped command is one line with the nearest command, as a
// mistyped flag is, not the whole usage.
func TestUnknownCommandIsOneLine(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	out, code := w.walbox(nil, "rnu")
	wantExit(t, code, 2, out)
	oneLine(t, out, `unknown command "rnu"`, `did you mean "run"?`, "walbox --help")
}

// TestConfigTablesMergeKeys: the check for mistyped keys in tables follows YAML merge keys
// (<<: *defaults) instead of calling them unknown, and still finds a typo inside the merged
// mapping.
func TestConfigTablesMergeKeys(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	dir := t.TempDir()
	for name, c := range map[string]struct {
		yaml, want string
		code       int
	}{
		"merge.yaml": {"tables:\n  - <<: &cols {event-type: event_type, payload: payload}\n    table: public.outbox\n", "slot", 0},
		"typo.yaml":  {"tables:\n  - <<: &cols {evnet-type: event_type}\n    table: public.outbox\n", `unknown key "evnet-type"`, 2},
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		out, code := w.walbox([]string{"WALBOX_CONFIG=" + path}, "status")
		wantExit(t, code, c.code, out)
		if !strings.Contains(out, c.want) {
			t.Errorf("%s: output does not say %q:\n%s", name, c.want, out)
		}
	}
}
