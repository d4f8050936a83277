package e2e_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// onServer returns the database URL u on the server at srv's host and port.
func onServer(t *testing.T, u, srv string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	s, err := url.Parse(srv)
	if err != nil {
		t.Fatal(err)
	}
	p.Host = s.Host
	return p.String()
}

// walbox pointed at a hot standby without --replication-url stops at once, with one line that
// names the way out, and doctor says the same; it used to retry for ever on "recovery is in
// progress".
func TestStandbyAsDatabaseURLStopsAtOnce(t *testing.T) {
	pg := testenv.StartPostgres(t)
	testenv.RequireOwn(t, pg)
	standby := testenv.StartStandby(t, pg, "standby1")
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	onStandby := []string{"WALBOX_DATABASE_URL=" + onServer(t, w.db, standby.URL())}

	start := time.Now()
	out, code := w.walbox(onStandby, "run")
	took := time.Since(start)
	if code == 0 || !strings.Contains(out, "--replication-url") || strings.Contains(out, "retry_in") || took > 30*time.Second {
		t.Errorf("walbox run on a standby: exit %d after %v:\n%s\nwant a stop at once naming --replication-url", code, took, out)
	}
	t.Logf("walbox run on a standby, %v:\n%s", took.Round(time.Millisecond), out)
	var stops []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "is a standby") || strings.Contains(line, "points at a standby") {
			stops = append(stops, line)
		}
	}
	if len(stops) > 2 { // the log line and the final error
		t.Errorf("the standby is named %d times, want once in the log:\n%s", len(stops), out)
	}
	r := w.doctor(onStandby)
	if c := r.check(t, "postgres"); c.Status != "fail" || !strings.Contains(c.Fix, "--replication-url") {
		t.Errorf("doctor on a standby: postgres %s %q (fix %q), want a failure naming --replication-url", c.Status, c.Message, c.Fix)
	}
}

// With --replication-url, migrate creates the slot on the standby, status reads it there, and
// doctor checks the standby, its hot_standby_feedback and its slot against the record on the
// primary.
func TestDoctorChecksTheStandby(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.PGVersion(17))
	testenv.RequireOwn(t, pg)
	standby := testenv.StartStandby(t, pg, "standby1")
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	replURL := onServer(t, w.db, standby.URL())
	env := []string{"WALBOX_REPLICATION_URL=" + replURL, "WALBOX_SLOT=" + testenv.UniqueName("slot")}
	time.Sleep(time.Second) // the database reaches the standby
	if out, code := w.walbox(env, "migrate"); code != 0 || !strings.Contains(out, "created replication slot") {
		t.Fatalf("walbox migrate --replication-url exited %d:\n%s", code, out)
	}

	// walbox status reads the slot on the standby too.
	if out, code := w.walbox(env, "status"); code != 0 || strings.Contains(out, "missing") || !strings.Contains(out, "pgoutput") && !strings.Contains(out, "inactive") {
		t.Errorf("walbox status --replication-url exited %d:\n%s\nwant the standby's slot", code, out)
	}
	r := w.doctor(env)
	for _, name := range []string{"standby", "slot", "slot_record", "replication_connection"} {
		if c := r.check(t, name); c.Status != "pass" {
			t.Errorf("%s: %s %q (fix %q), want pass", name, c.Status, c.Message, c.Fix)
		}
	}
	if c := r.check(t, "slot"); !strings.Contains(c.Message, "pgoutput") {
		t.Errorf("slot: %q, want the standby's slot", c.Message)
	}
	if c := r.check(t, "hot_standby_feedback"); c.Status != "fail" || !strings.Contains(c.Fix, "hot_standby_feedback = on") {
		t.Errorf("hot_standby_feedback off: %s %q (fix %q), want a failure with the fix", c.Status, c.Message, c.Fix)
	}

	standby.Exec(t, standby.URL(), "ALTER SYSTEM SET hot_standby_feedback = on")
	standby.Exec(t, standby.URL(), "SELECT pg_reload_conf()")
	time.Sleep(500 * time.Millisecond)
	r = w.doctor(env)
	if c := r.check(t, "hot_standby_feedback"); c.Status != "pass" {
		t.Errorf("hot_standby_feedback on: %s %q (fix %q), want pass", c.Status, c.Message, c.Fix)
	}
	if r.code != 0 {
		t.Errorf("doctor exited %d on a good standby setup:\n%s", r.code, r.out)
	}

	// Promoted, with --database-url still at the old primary: the standby's slot no longer gets
	// the primary's rows, and walbox run stops; doctor fails the same way. With --database-url
	// at the promoted server, walbox decodes there as on a primary.
	standby.Promote(t)
	r = w.doctor(env)
	if c := r.check(t, "standby"); c.Status != "fail" || !strings.Contains(c.Message, "not the --database-url server") ||
		!strings.Contains(c.Fix, "--database-url") {
		t.Errorf("promoted standby: %s %q (fix %q), want a failure that names --database-url", c.Status, c.Message, c.Fix)
	}
	r = w.doctor(append(env, "WALBOX_DATABASE_URL="+replURL))
	if c := r.check(t, "standby"); c.Status != "warn" {
		t.Errorf("promoted standby as --database-url too: %s %q, want a warning", c.Status, c.Message)
	}
}
