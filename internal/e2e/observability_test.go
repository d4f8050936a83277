package e2e_test

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// metric returns the value of one series in a /metrics body (0 if absent).
func metric(body, series string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// waitHTTP polls addr+path until check accepts the answer.
func waitHTTP(t *testing.T, addr, path, what string, check func(code int, body string) bool) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var code int
	var body string
	var err error
	for time.Now().Before(deadline) {
		code, body, err = testenv.HTTPGet(addr, path)
		if err == nil && check(code, body) {
			return body
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: last answer of %s: %d %q (%v)", what, path, code, body, err)
	return ""
}

func TestMetricsHealthAndStatusFollowTheRelay(t *testing.T) {
	rabbit := testenv.StartRabbit(t)
	testenv.RequireOwn(t, rabbit)
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	addr := testenv.FreeAddr(t)
	w.startRelay("WALBOX_LISTEN=" + addr)

	if code, body, err := testenv.HTTPGet(addr, "/healthz"); err == nil && code != 200 {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	waitHTTP(t, addr, "/readyz", "ready while streaming", func(code int, _ string) bool { return code == 200 })

	x := w.insertTx(w.conn, 25, "order.created")
	w.drain([]txn{x}, nil, time.Minute)
	body := waitHTTP(t, addr, "/metrics", "confirms counted", func(_ int, b string) bool {
		return metric(b, `walbox_messages_confirmed_total{event_type="order.created"}`) == 25
	})
	checks := map[string]func(float64) bool{
		`walbox_messages_published_total{event_type="order.created"}`: func(v float64) bool { return v == 25 },
		`walbox_confirm_latency_seconds_count`:                        func(v float64) bool { return v == 25 },
		`walbox_commit_to_confirm_seconds_count`:                      func(v float64) bool { return v == 25 },
		`walbox_active`:                                               func(v float64) bool { return v == 1 },
		`walbox_confirmed_lsn_bytes`:                                  func(v float64) bool { return v > 0 },
		`walbox_last_confirm_timestamp_seconds`:                       func(v float64) bool { return v > 0 },
	}
	for series, ok := range checks {
		if v := metric(body, series); !ok(v) {
			t.Errorf("%s = %v", series, v)
		}
	}

	// A broker outage: not ready, a reconnect counted with its reason, the error in /status.
	rabbit.Kill(t)
	w.insertTx(w.conn, 1, "order.created")
	waitHTTP(t, addr, "/readyz", "not ready without the broker", func(code int, _ string) bool { return code == 503 })
	waitHTTP(t, addr, "/metrics", "broker reconnect counted", func(_ int, b string) bool {
		return metric(b, `walbox_reconnects_total{reason="broker"}`) >= 1
	})
	_, st, _ := testenv.HTTPGet(addr, "/status")
	var status struct {
		State     string `json:"state"`
		LastError string `json:"last_error"`
	}
	if err := json.Unmarshal([]byte(st), &status); err != nil {
		t.Fatalf("/status: %v: %s", err, st)
	}
	if status.LastError == "" || strings.Contains(status.LastError, "guest:guest") {
		t.Errorf("/status last_error = %q, want the broker error without the password", status.LastError)
	}
	out, _ := w.walbox([]string{"WALBOX_RELAY_URL=http://" + addr}, "status")
	if !strings.Contains(out, "last_error") || !strings.Contains(out, "relay_state") {
		t.Errorf("walbox status does not show the relay's state and last error:\n%s", out)
	}
	rabbit.Start(t)
	waitHTTP(t, addr, "/readyz", "ready again", func(code int, _ string) bool { return code == 200 })
}

func TestStandbyReportsItself(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	active, standby := testenv.FreeAddr(t), testenv.FreeAddr(t)
	first := w.startRelay("WALBOX_LISTEN=" + active)
	waitHTTP(t, active, "/readyz", "first relay streaming", func(code int, _ string) bool { return code == 200 })
	second := w.startRelay("WALBOX_LISTEN=" + standby)
	waitHTTP(t, standby, "/readyz", "second relay is a standby", func(code int, b string) bool {
		return code == 200 && strings.Contains(b, "standby")
	})
	time.Sleep(3 * time.Second) // three of its retries
	if n := strings.Count(second.Output(), "slot is in use"); n != 1 {
		t.Errorf("the standby said %d times that the slot is in use, want once:\n%s", n, second.Output())
	}
	body := waitHTTP(t, standby, "/metrics", "standby metrics", func(int, string) bool { return true })
	if v := metric(body, "walbox_active"); v != 0 {
		t.Errorf("standby walbox_active = %v", v)
	}
	// With both running, every message is published once: the standby publishes nothing.
	both := w.insertTx(w.conn, 50, "order.created")
	got := w.drain([]txn{both}, nil, time.Minute)
	got = append(got, w.drainQuiet(500*time.Millisecond)...)
	if dups := checkAll(t, []txn{both}, got); dups != 0 {
		t.Fatalf("%d duplicates while a standby was running beside the active relay", dups)
	}
	body = waitHTTP(t, standby, "/metrics", "standby metrics", func(int, string) bool { return true })
	if v := metric(body, `walbox_messages_published_total{event_type="order.created"}`); v != 0 {
		t.Fatalf("the standby published %v messages", v)
	}
	first.Kill()
	start := time.Now()
	waitHTTP(t, standby, "/readyz", "standby takes over", func(code int, b string) bool {
		return code == 200 && strings.Contains(b, "streaming")
	})
	t.Logf("standby took over %v after the active relay was killed", time.Since(start).Round(time.Millisecond))
	x := w.insertTx(w.conn, 3, "order.created")
	w.drain([]txn{x}, nil, time.Minute)
	_, st, _ := testenv.HTTPGet(standby, "/status")
	var status struct {
		State     string  `json:"state"`
		LastError *string `json:"last_error"`
	}
	if err := json.Unmarshal([]byte(st), &status); err != nil {
		t.Fatalf("/status: %v: %s", err, st)
	}
	if status.State != "streaming" || status.LastError != nil {
		t.Errorf("/status after the take-over = %s, want streaming without the standby's last_error", st)
	}
}
