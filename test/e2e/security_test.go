package e2e_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// walbox speaks TLS to both servers and verifies them: sslmode=verify-full for PostgreSQL, amqps
// with a CA file (and host name check) for RabbitMQ. Passwords come from files.
func TestTLSAndPasswordFiles(t *testing.T) {
	if testenv.Short() {
		t.Skip("end-to-end test")
	}
	certs := testenv.NewCerts(t)
	pg := testenv.StartPostgres(t, testenv.WithTLS(certs))
	testenv.RequireOwn(t, pg)
	rabbit := testenv.StartRabbitTLS(t, certs)
	const password = "Tls-pw-8472-secret"
	rabbit.Ctl(t, "add_user", "walbox", password)
	rabbit.Ctl(t, "set_permissions", "-p", "/", "walbox", ".*", ".*", ".*")

	w := newWorld(t, pg, rabbit)
	dir := t.TempDir()
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tlsDB := strings.Replace(w.db, "sslmode=disable", "sslmode=verify-full&sslrootcert="+certs.CAFile, 1)
	amqpsURL := strings.Replace(rabbit.TLSURL(), "guest:guest@", "walbox@", 1)
	env := []string{
		"WALBOX_DATABASE_URL=",
		"WALBOX_DATABASE_URL_FILE=" + write("db-url", tlsDB),
		"WALBOX_AMQP_URL=" + amqpsURL,
		"WALBOX_AMQP_PASSWORD_FILE=" + write("amqp-password", password),
		"WALBOX_AMQP_CA_FILE=" + certs.CAFile,
	}
	// os/exec keeps the last of duplicate variables, so these override world.env.
	x := w.insertTx(w.conn, 20, "order.created")
	r := w.startRelay(env...)
	got := w.drain([]txn{x}, nil, time.Minute)
	checkAll(t, []txn{x}, got)
	var ssl bool
	if err := w.conn.QueryRow(t.Context(), `SELECT coalesce(bool_or(s.ssl), false) FROM pg_stat_ssl s
		JOIN pg_stat_replication r ON r.pid = s.pid`).Scan(&ssl); err != nil {
		t.Fatal(err)
	}
	if !ssl {
		t.Error("the replication connection does not use TLS")
	}
	r.Kill()

	other := testenv.NewCerts(t) // a CA that did not sign the servers' certificates
	t.Run("postgres certificate from another CA", func(t *testing.T) {
		bad := strings.Replace(w.db, "sslmode=disable", "sslmode=verify-full&sslrootcert="+other.CAFile, 1)
		out, code := w.walbox([]string{"WALBOX_DATABASE_URL=" + bad}, "status")
		if code == 0 || !strings.Contains(out, "certificate") {
			t.Fatalf("exit %d, output %q: want a certificate error", code, out)
		}
	})
	t.Run("broker certificate from another CA", func(t *testing.T) {
		out, code := w.walbox(append(env, "WALBOX_AMQP_CA_FILE="+other.CAFile), "run")
		if code != 1 || !strings.Contains(out, "certificate") {
			t.Fatalf("exit %d, output %q: want exit 1 with a certificate error", code, out)
		}
	})
	t.Run("wrong broker password stays secret", func(t *testing.T) {
		const wrong = "Wrong-pw-5531-secret"
		out, code := w.walbox(append(env, "WALBOX_AMQP_PASSWORD_FILE="+write("wrong", wrong)), "run")
		if code != 1 || strings.Contains(out, wrong) || strings.Contains(out, password) {
			t.Fatalf("exit %d, output %q: want exit 1 without any password", code, out)
		}
	})
}
