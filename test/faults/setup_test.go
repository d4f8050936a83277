package faults_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// The replication link goes silent, and stays so while the relay starts new sessions: every
// connection is accepted and then hears nothing. The streaming session ends on the silence; each
// setup after it must end too, at its deadline (the silence bound, here 1.5 s: three quarters of
// wal_sender_timeout), rather than wait for TCP to give up. Once the link heals the relay streams
// again.
func TestPartitionDuringSessionSetup(t *testing.T) {
	heavy(t)
	pg := testenv.StartPostgres(t, testenv.WithSetting("wal_sender_timeout", "2s"))
	testenv.RequireOwn(t, pg)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	p := newProxy(t, hostOf(t, pg.URL()))
	w.relayDB = withHost(t, w.db, p.addr)
	r := w.startRelay()
	r.waitState("streaming", time.Minute)

	p.partition()
	noticed := waitFor(t, 30*time.Second, "a session setup ended by its deadline", func() bool {
		st, err := r.status()
		return err == nil && strings.Contains(st.LastError, "session setup")
	})
	st := mustStatus(t, r)
	t.Logf("setup in the partition ended %v after it began: %s", noticed.Round(time.Millisecond), st.LastError)

	p.heal()
	r.waitState("streaming", time.Minute)
	if _, err := w.conn.Exec(context.Background(), `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '1', 'after.heal', '{}')`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the row after the partition confirmed", func() bool {
		st, err := r.status()
		return err == nil && st.Confirmed >= 1
	})
}
