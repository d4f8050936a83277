package e2e_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/testenv"
)

// walbox run refuses to stream from one server while it checks and records on another. A
// multi-host --database-url can pair them: here its first server admits no replication
// connections (max_wal_senders = 0), so the replication connection falls through to the second
// server, another cluster, while the SQL connection stays on the first. And --replication-url
// may name a server that is no standby of the --database-url primary. Each is one line naming
// both system identifiers, exit 1, before the slot is touched.
func TestRunRefusesTwoServers(t *testing.T) {
	if testenv.Short() {
		t.Skip("end-to-end test: needs PostgreSQL and RabbitMQ")
	}
	first := testenv.StartPostgres(t, testenv.WithSetting("max_wal_senders", "0"))
	testenv.RequireOwn(t, first)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	u, err := url.Parse(w.db)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	first.Exec(t, first.URL(), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	f, err := url.Parse(first.URL())
	if err != nil {
		t.Fatal(err)
	}
	f.Path = "/" + name
	firstDB := f.String()
	if out, code := w.walbox([]string{"WALBOX_DATABASE_URL=" + firstDB}, "migrate", "--no-slot"); code != 0 {
		t.Fatalf("walbox migrate --no-slot on the first server exited %d:\n%s", code, out)
	}
	firstID, secondID := systemID(t, first.Conn(t, firstDB)), systemID(t, w.conn)
	if firstID == secondID {
		t.Fatalf("both servers have system identifier %s", firstID)
	}

	both := *u
	both.Host = f.Host + "," + u.Host
	for _, c := range []struct {
		name string
		env  []string
		want []string
	}{
		{"multi-host database url", []string{"WALBOX_DATABASE_URL=" + both.String()},
			[]string{"the replication connection reports system identifier " + secondID, "the SQL connection reports " + firstID}},
		{"replication url at another cluster", []string{"WALBOX_DATABASE_URL=" + firstDB, "WALBOX_REPLICATION_URL=" + w.db},
			[]string{"the --replication-url server reports system identifier " + secondID, "the --database-url server reports " + firstID}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, code := w.walbox(c.env, "run")
			wantExit(t, code, 1, out)
			last := out[strings.LastIndex(strings.TrimRight(out, "\n"), "\n")+1:]
			oneLine(t, last, append(c.want, "walbox run: the replication connection and the SQL connection reach different servers")...)
		})
	}
}

// systemID returns the system identifier of conn's server.
func systemID(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var id uint64
	if err := conn.QueryRow(context.Background(), "SELECT system_identifier FROM pg_control_system()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(id)
}
