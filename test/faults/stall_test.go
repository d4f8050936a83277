package faults_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
)

// A row names, in its exchange column, an exchange that exists but has no queue bound and no
// alternate exchange: the broker returns it as unroutable every time. The relay stalls there,
// and says so (/readyz not ready, the error naming the return), but its retries send that row
// alone: the rows committed behind it, published once before the first return, are not
// delivered again at each retry. Once a queue is bound the row passes and the stream goes on.
func TestUnroutableRowStallsWithoutReplayingTheWindow(t *testing.T) {
	heavy(t)
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	ctx := context.Background()
	if _, err := w.conn.Exec(ctx, "ALTER TABLE outbox ADD COLUMN target text"); err != nil {
		t.Fatal(err)
	}
	lonely := testenv.UniqueName("lonely")
	conn, ch := dialAMQP(t, w.rabbit.URL())
	defer conn.Close()
	if err := ch.ExchangeDeclare(lonely, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "walbox.yaml")
	if err := os.WriteFile(conf, []byte("tables:\n  - table: public.outbox\n    exchange-column: target\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	insert := func(eventType string, target any) {
		t.Helper()
		if _, err := w.conn.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, target)
			VALUES ('order', '1', $1, '{}', $2)`, eventType, target); err != nil {
			t.Fatal(err)
		}
	}
	const behind = 30
	insert("stall.before", w.exchange)
	insert("stall.unroutable", lonely)
	for range behind {
		insert("stall.behind", w.exchange)
	}
	r := w.startRelay("WALBOX_CONFIG=" + conf)
	waitFor(t, time.Minute, "four sessions", func() bool {
		st, err := r.status()
		return err == nil && st.Sessions >= 4
	})
	st := mustStatus(t, r)
	if st.State != "stalled" {
		t.Errorf("state %s while the broker returns a row every time, want stalled", st.State)
	}
	if !strings.Contains(st.LastError, "NO_ROUTE") {
		t.Errorf("last error %q does not name the return", st.LastError)
	}
	if code := readyz(t, r); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz answered %d while stalled, want 503", code)
	}
	behindIDs := map[string]int{} // deliveries of each row behind the unroutable one
	w.eachInQueue(w.queue, func(d amqp.Delivery) {
		if d.Type == "stall.behind" {
			behindIDs[d.MessageId]++
		}
	})
	most, total := 0, 0
	for _, n := range behindIDs {
		most, total = max(most, n), total+n
	}
	t.Logf("SUMMARY %s sessions=%d rows_behind=%d deliveries_of_rows_behind=%d most_deliveries_of_one_row=%d",
		t.Name(), st.Sessions, behind, total, most)
	// The first session may publish any number of them before the return arrives; no retry may
	// publish them again.
	if most > 1 {
		t.Errorf("rows behind the unroutable one were delivered up to %d times each (%d deliveries in all) over %d "+
			"sessions: every retry sends the window again", most, total, st.Sessions)
	}

	// A queue bound for the row: it passes, and the stream goes on.
	q := testenv.UniqueName("q")
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q, "#", lonely, false, nil); err != nil {
		t.Fatal(err)
	}
	r.waitState("streaming", time.Minute)
	insert("stall.after", w.exchange)
	waitFor(t, time.Minute, "the row after the stall delivered", func() bool { return w.countQueue(w.queue)["stall.after"] > 0 })
	if got := w.countQueue(q)["stall.unroutable"]; got < 1 {
		t.Errorf("the unroutable row reached the queue bound for it %d times", got)
	}
}

// countQueue takes every message in queue and counts them by type (the event type).
func (w *world) countQueue(queue string) map[string]int {
	w.t.Helper()
	out := map[string]int{}
	w.eachInQueue(queue, func(d amqp.Delivery) { out[d.Type]++ })
	return out
}

// readyz returns the status code of the relay's /readyz.
func readyz(t *testing.T, r *relay) int {
	t.Helper()
	resp, err := http.Get("http://" + r.addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
