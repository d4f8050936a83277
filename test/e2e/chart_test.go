package e2e_test

import (
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// chartPod is deploy/helm/testdata/e2e-env.json: what the Helm chart's pods run, as the chart's
// own test renders it (and keeps current).
type chartPod struct {
	Relay, Migrate struct {
		Args []string
		Env  map[string]string
	}
	Config string
}

// TestChartEnvironment runs walbox as the Helm chart runs it: the migrate job's command and
// environment, then two relays with the relay's, with passwords read from files and the config
// file mounted. One streams and delivers, the other waits as a standby; a relay that finds the
// slot gone exits naming it, since the chart does not let relays create slots.
func TestChartEnvironment(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	var pod chartPod
	b, err := os.ReadFile("../../deploy/helm/testdata/e2e-env.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &pod); err != nil {
		t.Fatal(err)
	}
	// The pod's mounts: /etc/walbox/secrets (the Secret) and /etc/walbox/config (the ConfigMap).
	mounts := t.TempDir()
	amqpURL, err := url.Parse(w.rabbit.URL())
	if err != nil {
		t.Fatal(err)
	}
	amqpPassword, _ := amqpURL.User.Password()
	amqpURL.User = url.User(amqpURL.User.Username())
	dbURL, err := url.Parse(w.db)
	if err != nil {
		t.Fatal(err)
	}
	// The harness's own server trusts local connections; an external one takes the URL's password.
	dbPassword, ok := dbURL.User.Password()
	if ok {
		dbURL.User = url.User(dbURL.User.Username())
	} else {
		dbPassword = "unused: the test server trusts local connections"
	}
	for name, data := range map[string]string{
		"secrets/database-password": dbPassword + "\n",
		"secrets/amqp-password":     amqpPassword + "\n", // a trailing newline, as kubectl create secret --from-file leaves
		"config/walbox.yaml":        pod.Config,
	} {
		path := filepath.Join(mounts, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	slot := testenv.UniqueName("chart")
	fill := strings.NewReplacer("__DATABASE_URL__", dbURL.String(), "__AMQP_URL__", amqpURL.String(),
		"__SLOT__", slot, "__EXCHANGE__", w.exchange, "/etc/walbox/", mounts+"/")
	env := func(vars map[string]string, extra ...string) []string {
		out := []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range vars {
			out = append(out, k+"="+fill.Replace(v))
		}
		return append(out, extra...)
	}

	migrate := exec.Command(walboxBin(t), pod.Migrate.Args...)
	migrate.Env = env(pod.Migrate.Env)
	if out, err := migrate.CombinedOutput(); err != nil || !strings.Contains(string(out), "created replication slot "+slot) {
		t.Fatalf("the migrate job: %v\n%s", err, out)
	}

	active, standby := testenv.FreeAddr(t), testenv.FreeAddr(t)
	first := w.startRelayEnv(env(pod.Relay.Env, "WALBOX_LISTEN="+active), pod.Relay.Args...)
	waitHTTP(t, active, "/readyz", "first relay streaming", func(code int, b string) bool {
		return code == 200 && strings.Contains(b, "streaming")
	})
	second := w.startRelayEnv(env(pod.Relay.Env, "WALBOX_LISTEN="+standby), pod.Relay.Args...)
	waitHTTP(t, standby, "/readyz", "second relay waits as a standby", func(code int, b string) bool {
		return code == 200 && strings.Contains(b, "standby")
	})
	if !strings.Contains(first.Output(), `"window":64`) {
		t.Errorf("the config file's window did not reach the relay:\n%s", first.Output())
	}
	tx := w.insertTx(w.conn, 5, "order.created")
	if dups := checkAll(t, []txn{tx}, w.drain([]txn{tx}, nil, time.Minute)); dups != 0 {
		t.Errorf("%d duplicates", dups)
	}

	first.Kill()
	second.Kill()
	w.waitSlotReleased(slot) // the walsender notices the dead relay a moment later
	w.pg.Exec(t, w.db, "SELECT pg_drop_replication_slot($1)", slot)
	third := w.startRelayEnv(env(pod.Relay.Env, "WALBOX_LISTEN="+testenv.FreeAddr(t)), pod.Relay.Args...)
	if code := third.Wait(time.Minute); code != 1 || !strings.Contains(third.Output(), "replication slot does not exist: slot "+slot) {
		t.Fatalf("a relay without its slot: exit %d, want 1 naming the slot:\n%s", code, third.Output())
	}
}
