package e2e_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
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
	checks := map[string]func(float64) bool{
		`walbox_messages_confirmed_total{event_type="order.created"}`: func(v float64) bool { return v == 25 },
		`walbox_messages_published_total{event_type="order.created"}`: func(v float64) bool { return v == 25 },
		`walbox_confirm_latency_seconds_count`:                        func(v float64) bool { return v == 25 },
		`walbox_commit_to_confirm_seconds_count`:                      func(v float64) bool { return v == 25 },
		`walbox_commit_to_write_seconds_count`:                        func(v float64) bool { return v == 25 },
		`walbox_publish_to_write_seconds_count`:                       func(v float64) bool { return v == 25 },
		`walbox_active`:                                               func(v float64) bool { return v == 1 },
		`walbox_confirmed_lsn_bytes`:                                  func(v float64) bool { return v > 0 },
		`walbox_last_confirm_timestamp_seconds`:                       func(v float64) bool { return v > 0 },
	}
	// A confirm is counted before its latencies and the time of the last confirm are: wait for all.
	body := waitHTTP(t, addr, "/metrics", "confirms counted", func(_ int, b string) bool {
		for series, ok := range checks {
			if !ok(metric(b, series)) {
				return false
			}
		}
		return true
	})
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

// A memory alarm blocks the relay's publishing connection: /readyz answers 503 "blocked",
// walbox_broker_blocked is 1 and a WARN names the broker's reason. Once the alarm clears they
// revert, a WARN says how long the block lasted, and the rows written meanwhile arrive.
func TestBlockedBrokerIsSeen(t *testing.T) {
	rabbit := testenv.StartRabbit(t)
	testenv.RequireOwn(t, rabbit)
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	addr := testenv.FreeAddr(t)
	r := w.startRelay("WALBOX_LISTEN=" + addr)
	waitHTTP(t, addr, "/readyz", "ready while streaming", func(code int, _ string) bool { return code == 200 })
	w.drain([]txn{w.insertTx(w.conn, 5, "order.created")}, nil, time.Minute)

	rabbit.MemoryAlarm(t, true)
	alarmed := true
	defer func() {
		if alarmed {
			rabbit.MemoryAlarm(t, false)
		}
	}()
	during := w.insertTx(w.conn, 5, "order.created")
	waitHTTP(t, addr, "/readyz", "not ready while blocked", func(code int, body string) bool {
		return code == 503 && strings.Contains(body, "blocked")
	})
	waitHTTP(t, addr, "/metrics", "walbox_broker_blocked 1", func(_ int, b string) bool {
		return metric(b, "walbox_broker_blocked") == 1
	})
	blockedLine := regexp.MustCompile(`level=WARN msg="broker blocks publishing[^"]*" broker=\S+ reason="?[a-z]`)
	r.WaitFor("the WARN of the block", 30*time.Second, func() bool { return blockedLine.MatchString(r.Output()) })
	const hold = 2 * time.Second
	time.Sleep(hold)

	rabbit.MemoryAlarm(t, false)
	alarmed = false
	waitHTTP(t, addr, "/readyz", "ready once unblocked", func(code int, body string) bool {
		return code == 200 && strings.Contains(body, "streaming")
	})
	waitHTTP(t, addr, "/metrics", "walbox_broker_blocked 0", func(_ int, b string) bool {
		return strings.Contains(b, "\nwalbox_broker_blocked 0\n")
	})
	unblockedLine := regexp.MustCompile(`level=WARN msg="broker unblocked publishing" broker=\S+ blocked_for=(\S+)`)
	var m []string
	r.WaitFor("the WARN of the unblock", 30*time.Second, func() bool {
		m = unblockedLine.FindStringSubmatch(r.Output())
		return m != nil
	})
	if took, err := time.ParseDuration(m[1]); err != nil || took < hold || took > time.Minute {
		t.Errorf("unblock logged blocked_for=%s, want a readable duration of at least %v (%v)", m[1], hold, err)
	}
	if n := strings.Count(r.Output(), "broker blocks publishing"); n != 1 {
		t.Errorf("the block was logged %d times, want once:\n%s", n, r.Output())
	}
	w.drain([]txn{during}, nil, time.Minute)
}

// A large row stuck in a write to a blocked broker ends the session at each write timeout, and
// walbox starts again into the same alarm. The block is one block all along: walbox_broker_blocked
// stays 1 and /readyz 503 between sessions, and one WARN says when it started and one when it
// ended, so the alert's minute is not reset and no WARN says unblocked while the alarm lasts.
func TestBlockedAcrossSessionsIsOneBlock(t *testing.T) {
	rabbit := testenv.StartRabbit(t)
	testenv.RequireOwn(t, rabbit)
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	addr := testenv.FreeAddr(t)
	r := w.startRelay("WALBOX_LISTEN=" + addr)
	waitHTTP(t, addr, "/readyz", "ready while streaming", func(code int, _ string) bool { return code == 200 })
	rabbit.MemoryAlarm(t, true)
	alarmed := true
	defer func() {
		if alarmed {
			rabbit.MemoryAlarm(t, false)
		}
	}()
	var id uuid.UUID
	err := w.conn.QueryRow(context.Background(), `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '1', 'order.created', jsonb_build_object('pad', repeat('x', 12 << 20))) RETURNING id`).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, addr, "/metrics", "walbox_broker_blocked 1", func(_ int, b string) bool {
		return metric(b, "walbox_broker_blocked") == 1
	})
	var sessions int64
	for end := time.Now().Add(40 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		_, body, err := testenv.HTTPGet(addr, "/metrics")
		if err != nil {
			continue
		}
		if metric(body, "walbox_broker_blocked") != 1 {
			t.Errorf("walbox_broker_blocked 0 during the alarm, after %d sessions", sessions)
			break
		}
		if code, body, err := testenv.HTTPGet(addr, "/readyz"); err == nil && code == 200 {
			t.Errorf("/readyz 200 %q during the alarm", body)
			break
		}
		_, st, _ := testenv.HTTPGet(addr, "/status")
		var s struct {
			Sessions int64 `json:"sessions"`
		}
		if json.Unmarshal([]byte(st), &s) == nil {
			sessions = s.Sessions
		}
	}
	if sessions < 2 {
		t.Logf("only %d sessions during the alarm; the write timeout did not end one", sessions)
	}
	if strings.Contains(r.Output(), "broker unblocked publishing") {
		t.Errorf("an unblock was logged during the alarm:\n%s", testenv.Tail(r.Output(), 20))
	}
	rabbit.MemoryAlarm(t, false)
	alarmed = false
	waitHTTP(t, addr, "/readyz", "ready once unblocked", func(code int, body string) bool { return code == 200 })
	w.drain([]txn{{ids: []uuid.UUID{id}}}, nil, 2*time.Minute)
	out := r.Output()
	if b, u := strings.Count(out, "broker blocks publishing"), strings.Count(out, "broker unblocked publishing"); b != 1 || u != 1 {
		t.Errorf("one alarm over %d sessions logged %d blocks and %d unblocks, want one each:\n%s", sessions, b, u, testenv.Tail(out, 30))
	}
}
