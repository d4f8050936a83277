package faults_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/walbox/walbox/internal/testenv"
)

// TestARowToParkWaitsForItsQueue: while walbox cannot declare its park queue, a row to park waits
// and the slot does not pass it. Here another connection holds a queue of that name, exclusive,
// so every declaration is refused (on a cluster: a classic queue whose node is down).
// walbox_park_waiting is 1, /readyz 503, and /status does not call the wait a block by the
// broker. A SIGKILL while the row waits loses nothing: the next walbox waits for the same row.
// Once the queue can be declared the row is parked, and every other row is delivered.
func TestARowToParkWaitsForItsQueue(t *testing.T) {
	heavy(t)
	pg := testenv.SharedPostgres(t)
	rabbit := testenv.SharedRabbit(t)
	w := newWorld(t, pg, rabbit)
	park := w.exchange + ".parked"
	holder, hch := dialAMQP(t, rabbit.URL())
	defer holder.Close()
	if _, err := hch.QueueDeclare(park, false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	wr, v, r := brokerWorld(t, w, 36)
	waitFor(t, time.Minute, "walbox to say it cannot declare its park queue", func() bool {
		return strings.Contains(r.Output(), "cannot declare a queue")
	})

	bad := uuid.NewString()
	if _, err := w.conn.Exec(context.Background(), `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ($1, 'bad', 'bad', '', '{}')`, bad); err != nil {
		t.Fatal(err)
	}
	waiting := func(r *relay) bool {
		return r.gauge("walbox_park_waiting") == 1 && strings.Contains(r.readyz(), "a row waits to be parked in queue "+park)
	}
	waitFor(t, 2*time.Minute, "walbox to say a row waits to be parked", func() bool { return waiting(r) })
	// The stream's publish call gives up every status interval (250 ms) and tries again; for
	// twelve of them, /status must not blame the broker, and nothing may count as parked.
	for i := 0; i < 12; i++ {
		time.Sleep(250 * time.Millisecond)
		st := mustStatus(t, r)
		if st.BrokerBlocked {
			t.Errorf("/status says broker_blocked while a row waits for its park queue: %+v", st)
			break
		}
		if st.Parked != 0 {
			t.Fatalf("walbox counts %d rows parked while its park queue cannot be declared", st.Parked)
		}
	}

	r.Kill()
	r = w.startRelay()
	waitFor(t, 2*time.Minute, "the next walbox to wait for the same row", func() bool { return waiting(r) })
	holder.Close()
	waitFor(t, 2*time.Minute, "the waiting row parked", func() bool {
		st, err := r.status()
		return err == nil && st.Parked == 1 && r.gauge("walbox_park_waiting") == 0
	})
	w.progress(v, 300, 90*time.Second)
	wr.stop()
	if r.Exited() {
		t.Fatalf("walbox exited:\n%s", testenv.Tail(r.Output(), 30))
	}
	w.verdict(wr.Writer, v, 2*time.Minute, 1, 1, fmt.Sprintf("parked=%s", bad))
	conn, ch := dialAMQP(t, rabbit.URL())
	defer conn.Close()
	d, ok, err := ch.Get(park, true)
	if err != nil || !ok || d.MessageId != bad {
		t.Errorf("park queue: got %q (found %t, %v), want the bad row %s", d.MessageId, ok, err, bad)
	}
	if d, ok, _ := ch.Get(park, true); ok {
		t.Errorf("park queue holds a second message %q: the row was parked twice", d.MessageId)
	}
}

// TestAParkWaitGoesWithTheSlot: a relay that waits for its park queue loses the slot to a
// standby (its walsender is terminated until the standby takes the slot over). The standby
// replays from the slot and waits for the same row; the old relay, a standby now, no longer says
// a row waits (walbox_park_waiting 0, /readyz 200 "standby"): it said so until its next
// session, for good. Once the queue can be declared, the new relay parks the row once.
func TestAParkWaitGoesWithTheSlot(t *testing.T) {
	heavy(t)
	pg := testenv.SharedPostgres(t)
	rabbit := testenv.SharedRabbit(t)
	w := newWorld(t, pg, rabbit)
	park := w.exchange + ".parked"
	holder, hch := dialAMQP(t, rabbit.URL())
	defer holder.Close()
	if _, err := hch.QueueDeclare(park, false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	wr, v, a := brokerWorld(t, w, 37)
	b := w.startRelay()
	b.waitState("standby", time.Minute)

	bad := uuid.NewString()
	if _, err := w.conn.Exec(context.Background(), `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ($1, 'bad', 'bad', '', '{}')`, bad); err != nil {
		t.Fatal(err)
	}
	waiting := func(r *relay) bool {
		return r.gauge("walbox_park_waiting") == 1 && strings.Contains(r.readyz(), "a row waits to be parked in queue "+park)
	}
	waitFor(t, 2*time.Minute, "the active relay to say a row waits to be parked", func() bool { return waiting(a) })

	// Terminate the walsender until the other relay holds the slot.
	waitFor(t, 3*time.Minute, "the standby to take the slot over", func() bool {
		if b.state() == "streaming" {
			return true
		}
		if a.state() == "streaming" {
			_, _ = w.conn.Exec(context.Background(),
				`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1`, w.slot)
		}
		time.Sleep(300 * time.Millisecond)
		return false
	})
	waitFor(t, 2*time.Minute, "the relay that took the slot to wait for the row", func() bool { return waiting(b) })
	waitFor(t, time.Minute, "the old relay to be a standby that waits for no row", func() bool {
		return a.state() == "standby" && a.gauge("walbox_park_waiting") == 0 && strings.HasPrefix(a.readyz(), "standby")
	})

	holder.Close()
	waitFor(t, 2*time.Minute, "the waiting row parked", func() bool {
		st, err := b.status()
		return err == nil && st.Parked == 1 && b.gauge("walbox_park_waiting") == 0
	})
	w.progress(v, 300, 90*time.Second)
	wr.stop()
	w.verdict(wr.Writer, v, 2*time.Minute, 1, 1, fmt.Sprintf("parked=%s", bad))
	conn, ch := dialAMQP(t, rabbit.URL())
	defer conn.Close()
	d, ok, err := ch.Get(park, true)
	if err != nil || !ok || d.MessageId != bad {
		t.Errorf("park queue: got %q (found %t, %v), want the bad row %s", d.MessageId, ok, err, bad)
	}
	if d, ok, _ := ch.Get(park, true); ok {
		t.Errorf("park queue holds a second message %q: the row was parked twice", d.MessageId)
	}
}
