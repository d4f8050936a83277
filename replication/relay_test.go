package replication_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/wire"
)

func ids(ms []wire.Message) []uuid.UUID {
	out := make([]uuid.UUID, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func equalIDs(t *testing.T, got, want []uuid.UUID) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d ids, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("id %d = %s, want %s (order or content differs)", i, got[i], want[i])
		}
	}
}

func TestSlotMovesOnlyPastConfirmedTransactions(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(false))
	e.start(nil)
	start := e.slotLSN()

	first, before1 := e.insertTx(2, "a.one")
	second, before2 := e.insertTx(3, "a.two")
	third, before3 := e.insertTx(1, "a.three")
	e.broker.waitPublished(t, 6)

	notPast := func(limit pglogrepl.LSN) func() error {
		return func() error {
			if got := e.slotLSN(); got > limit {
				return fmt.Errorf("confirmed_flush_lsn %s passed %s with messages unconfirmed", got, limit)
			}
			return nil
		}
	}
	// Nothing confirmed: the slot stays where it was.
	staysTrue(t, 500*time.Millisecond, "no confirms", notPast(before1))

	// The first transaction and one message of the second: only the first counts.
	e.broker.ack(3)
	waitFor(t, 10*time.Second, "slot past the first transaction", func() bool { return e.slotLSN() > before1 })
	staysTrue(t, 500*time.Millisecond, "second transaction half confirmed", notPast(before2))

	e.broker.ack(2)
	waitFor(t, 10*time.Second, "slot past the second transaction", func() bool { return e.slotLSN() > before2 })
	staysTrue(t, 300*time.Millisecond, "third transaction unconfirmed", notPast(before3))

	e.broker.ack(1)
	waitFor(t, 10*time.Second, "slot past the third transaction", func() bool { return e.slotLSN() > before3 })

	if e.slotLSN() <= start {
		t.Fatal("slot never moved")
	}
	equalIDs(t, ids(e.broker.messages()), append(append(first, second...), third...))
}

func TestFailuresReplayFromTheSlot(t *testing.T) {
	tests := []struct {
		name string
		fail func(b *fakeBroker)
	}{
		{"nack", func(b *fakeBroker) { b.verdict(1, errors.New("nacked")) }},
		{"returned as unroutable", func(b *fakeBroker) { b.verdict(1, errors.New("returned: NO_ROUTE")) }},
		{"connection lost", func(b *fakeBroker) { b.kill(errors.New("connection reset")) }},
	}
	pg := testenv.SharedPostgres(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := setup(t, pg, newFakeBroker(false))
			e.start(nil)
			a, beforeA := e.insertTx(2, "x.a")
			b, beforeB := e.insertTx(2, "x.b")
			e.broker.waitPublished(t, 4)

			e.broker.ack(2) // transaction a
			waitFor(t, 10*time.Second, "slot past a", func() bool { return e.slotLSN() > beforeA })
			tt.fail(e.broker) // the first message of b
			e.broker.ack(1)   // the second message of b is confirmed, but b as a whole is not

			// The relay starts a new session and sends b again, from the slot.
			e.broker.waitSessions(t, 2)
			if got := e.slotLSN(); got > beforeB {
				t.Fatalf("slot %s passed transaction b (before %s) although its first message failed", got, beforeB)
			}
			e.broker.ackAll()
			got := e.broker.waitPublished(t, 6)
			equalIDs(t, ids(got[4:]), b)
			waitFor(t, 10*time.Second, "slot past b", func() bool { return e.slotLSN() > beforeB })
			equalIDs(t, ids(got[:2]), a)
		})
	}
}

func TestRolledBackRowsAreNeverPublished(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.start(nil)
	ctx := context.Background()
	tx, err := e.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '1', 'rolled.back', '{}')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	after, before := e.insertTx(1, "committed")
	e.broker.waitPublished(t, 1)
	waitFor(t, 10*time.Second, "slot past the committed row", func() bool { return e.slotLSN() > before })
	got := e.broker.messages()
	equalIDs(t, ids(got), after)
}

// Each message carries its transaction's commit time, from the server's Begin message.
func TestMessagesCarryTheirCommitTime(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.start(nil)
	var before, after time.Time
	if err := e.conn.QueryRow(context.Background(), "SELECT pg_catalog.clock_timestamp()").Scan(&before); err != nil {
		t.Fatal(err)
	}
	e.insertTx(2, "timed")
	if err := e.conn.QueryRow(context.Background(), "SELECT pg_catalog.clock_timestamp()").Scan(&after); err != nil {
		t.Fatal(err)
	}
	for _, m := range e.broker.waitPublished(t, 2) {
		if m.CommitTime.Before(before) || m.CommitTime.After(after) {
			t.Errorf("message %s: commit time %v, want between %v and %v", m.ID, m.CommitTime, before, after)
		}
	}
}

// The stream asks a publisher that keeps its writes to flush them whenever it goes back to waiting.
// This publisher confirms nothing it was not asked to flush.
// Everything is confirmed all the same, and the slot moves.
func TestStreamFlushesWhenItWaits(t *testing.T) {
	b := newFakeBroker(true)
	b.keepUntilFlush = true
	e := setup(t, testenv.SharedPostgres(t), b)
	e.start(func(c *replication.Config) { c.Window = 64 })
	var want []uuid.UUID
	var before pglogrepl.LSN
	for i := range 5 {
		var tx []uuid.UUID
		tx, before = e.insertTx(1+i*50, "flushed")
		want = append(want, tx...)
	}
	e.broker.waitPublished(t, len(want))
	waitFor(t, 10*time.Second, "slot past the last transaction", func() bool { return e.slotLSN() > before })
	equalIDs(t, ids(e.broker.messages()), want)
	b.mu.Lock()
	defer b.mu.Unlock()
	t.Logf("%d messages, %d flushes", len(want), b.flushes)
	if b.flushes == 0 {
		t.Fatal("never flushed")
	}
}

func TestBigTransactionStaysWithinTheWindow(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(false))
	const window = 16
	e.start(func(c *replication.Config) { c.Window = window })
	want, before := e.insertTx(500, "big")
	for published := 0; published < len(want); {
		e.broker.waitPublished(t, min(published+window, len(want)))
		if n := e.broker.pendingCount(); n > window {
			t.Fatalf("%d messages in flight, window is %d", n, window)
		}
		if e.slotLSN() > before {
			t.Fatal("slot passed the transaction before all its messages were confirmed")
		}
		published = len(e.broker.messages())
		e.broker.ack(window)
	}
	waitFor(t, 10*time.Second, "slot past the transaction", func() bool { return e.slotLSN() > before })
	equalIDs(t, ids(e.broker.messages()), want)
	if e.broker.maxInFlight > window {
		t.Fatalf("max in flight %d exceeded the window %d", e.broker.maxInFlight, window)
	}
}

func TestIdleOutboxBesideBusyTables(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	ctx := context.Background()
	if _, err := e.conn.Exec(ctx, "CREATE TABLE busy (n int)"); err != nil {
		t.Fatal(err)
	}
	e.start(nil)
	_, before := e.insertTx(1, "first")
	waitFor(t, 10*time.Second, "first row confirmed", func() bool { return e.slotLSN() > before })

	// A transaction that inserts an outbox row and stays open while other tables are busy.
	open, err := e.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx) //nolint:errcheck
	openID := uuid.New()
	if _, err := open.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ($1, 'order', '1', 'long.open', '{}')`, openID); err != nil {
		t.Fatal(err)
	}
	other := e.pg.Conn(t, e.db)
	busyUntil := func(cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("confirmed_flush_lsn stuck at %s while other tables were busy", e.slotLSN())
			}
			if _, err := other.Exec(ctx, "INSERT INTO busy SELECT generate_series(1, 100)"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The slot follows the WAL even though the outbox is idle.
	mark := e.currentLSN()
	busyUntil(func() bool { return e.slotLSN() > mark })
	mark = e.currentLSN()
	busyUntil(func() bool { return e.slotLSN() > mark })

	// The open transaction began before the slot's position; it must still be delivered.
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := e.broker.waitPublished(t, 2)
	if got[1].ID != openID {
		t.Fatalf("second message is %s, want the long-open transaction's %s", got[1].ID, openID)
	}
}

func TestAlterTableMidStream(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.start(nil)
	want, _ := e.insertTx(3, "before.alter")
	e.broker.waitPublished(t, 3)
	ctx := context.Background()
	if _, err := e.conn.Exec(ctx, "ALTER TABLE outbox ADD COLUMN tenant text DEFAULT 'acme'"); err != nil {
		t.Fatal(err)
	}
	more, _ := e.insertTx(3, "after.add")
	want = append(want, more...)
	if _, err := e.conn.Exec(ctx, "ALTER TABLE outbox DROP COLUMN tenant"); err != nil {
		t.Fatal(err)
	}
	more, before := e.insertTx(3, "after.drop")
	want = append(want, more...)
	e.broker.waitPublished(t, 9)
	waitFor(t, 10*time.Second, "slot past the last row", func() bool { return e.slotLSN() > before })
	got := e.broker.messages()
	equalIDs(t, ids(got), want)
	if got[4].EventType != "after.add" || string(got[4].Payload) != `{"n": 1}` {
		t.Fatalf("row after ALTER decoded as %+v", got[4])
	}
}

func TestGracefulShutdownWaitsForConfirms(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(false))
	e.start(func(c *replication.Config) { c.StatusInterval = time.Hour }) // only the final update may move the slot
	_, before := e.insertTx(5, "shutdown")
	e.broker.waitPublished(t, 5)
	go func() {
		time.Sleep(300 * time.Millisecond)
		e.broker.ack(5)
	}()
	if err := e.stop(); err != nil {
		t.Fatalf("Run after shutdown = %v, want nil", err)
	}
	// The server applies the last status update on its own time, after the relay closed.
	waitFor(t, 5*time.Second, "slot past the confirmed transaction after shutdown", func() bool { return e.slotLSN() > before })
}

func TestShutdownWithUnconfirmedMessagesKeepsThem(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(false))
	e.start(func(c *replication.Config) { c.ShutdownTimeout = 300 * time.Millisecond })
	_, before := e.insertTx(2, "kept")
	e.broker.waitPublished(t, 2)
	e.broker.ack(1)
	if err := e.stop(); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if got := e.slotLSN(); got > before {
		t.Fatalf("slot %s passed a transaction with an unconfirmed message", got)
	}
}

func TestServerChecks(t *testing.T) {
	t.Run("missing publication", func(t *testing.T) {
		e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
		e.start(func(c *replication.Config) { c.Publication = "nope" })
		err := e.wait(20 * time.Second)
		if !errors.Is(err, replication.ErrNoPublication) || replication.Retryable(err) {
			t.Fatalf("Run = %v, want a permanent ErrNoPublication", err)
		}
	})
	t.Run("wal_level replica", func(t *testing.T) {
		pg := testenv.StartPostgres(t, testenv.WithSetting("wal_level", "replica"))
		testenv.RequireOwn(t, pg)
		e := &env{t: t, pg: pg, db: pg.NewDatabase(t), slot: "walbox", broker: newFakeBroker(true)}
		e.start(nil)
		err := e.wait(20 * time.Second)
		if !errors.Is(err, inspect.ErrWalLevel) {
			t.Fatalf("Run = %v, want ErrWalLevel", err)
		}
	})
	t.Run("unreachable database", func(t *testing.T) {
		e := &env{t: t, db: "postgres://postgres@127.0.0.1:1/none?connect_timeout=2", slot: "walbox", broker: newFakeBroker(true)}
		e.start(nil)
		if err := e.wait(20 * time.Second); err == nil || replication.Retryable(err) {
			t.Fatalf("Run = %v, want a permanent error", err)
		}
	})
	t.Run("unreachable broker", func(t *testing.T) {
		b := newFakeBroker(true)
		b.dialErr = errors.New("dial tcp 127.0.0.1:1: connection refused")
		e := setup(t, testenv.SharedPostgres(t), b)
		e.start(nil)
		err := e.wait(20 * time.Second)
		if err == nil || replication.Retryable(err) {
			t.Fatalf("Run = %v, want a permanent error", err)
		}
	})
}

func TestSlotDroppedUnderTheRelayFailsClosed(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.start(nil)
	e.insertTx(1, "one")
	e.broker.waitPublished(t, 1)
	e.dropSlot()
	ctx := context.Background()
	err := e.wait(20 * time.Second)
	if !errors.Is(err, replication.ErrSlotMissing) {
		t.Fatalf("Run = %v, want ErrSlotMissing", err)
	}
	var exists bool
	if err := e.conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", e.slot).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatal("the relay recreated the dropped slot")
	}
}

func TestStandbyTakesOverWhenTheSlotIsReleased(t *testing.T) {
	e, first, standby, _ := activeAndStandby(t, nil)
	staysTrue(t, 500*time.Millisecond, "standby stays idle", func() error {
		if n := len(standby.messages()); n > 0 {
			return fmt.Errorf("standby published %d messages while the slot was active", n)
		}
		return nil
	})
	first()
	want, _ := e.insertTx(1, "two")
	got := standby.waitPublished(t, 1)
	equalIDs(t, ids(got[len(got)-1:]), want)
}

// The slot must be confirmed at a transaction's end, not at its commit record's start.
// Otherwise a restart sends the last confirmed transaction again. A later transaction is kept in flight so that
// no keepalive can move the slot past both.
func TestRestartResendsOnlyUnconfirmedTransactions(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(false))
	e.start(func(c *replication.Config) { c.ShutdownTimeout = 200 * time.Millisecond })
	_, before := e.insertTx(2, "confirmed")
	unconfirmed, _ := e.insertTx(1, "unconfirmed")
	e.broker.waitPublished(t, 3)
	e.broker.ack(2)
	waitFor(t, 10*time.Second, "slot past the first transaction", func() bool { return e.slotLSN() > before })
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	again := &env{t: t, pg: e.pg, db: e.db, conn: e.conn, slot: e.slot, broker: newFakeBroker(true)}
	again.start(nil)
	again.broker.waitPublished(t, 1)
	time.Sleep(300 * time.Millisecond)
	equalIDs(t, ids(again.broker.messages()), unconfirmed)
}

// While the broker blocks publishers, the relay keeps answering the server.
// So the walsender (here with a 1 s wal_sender_timeout) does not drop the session.
func TestBlockedBrokerKeepsTheSessionAlive(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.WithSetting("wal_sender_timeout", "1s"))
	testenv.RequireOwn(t, pg)
	e := setup(t, pg, newFakeBroker(true))
	e.start(nil)
	first, _ := e.insertTx(1, "before.block")
	e.broker.waitPublished(t, 1)
	e.broker.block()
	second, before := e.insertTx(3, "during.block")
	time.Sleep(3 * time.Second)
	if n := e.broker.sessionCount(); n != 1 {
		t.Fatalf("%d sessions: the blocked publish let the replication session time out", n)
	}
	if got := e.slotLSN(); got > before {
		t.Fatalf("slot %s passed messages that were never published", got)
	}
	e.broker.unblock()
	e.broker.waitPublished(t, 4)
	waitFor(t, 10*time.Second, "slot past the blocked transaction", func() bool { return e.slotLSN() > before })
	equalIDs(t, ids(e.broker.messages()), append(first, second...))
}

// A publish may end its session at the status deadline, as a publisher cutting a stalled write does.
// It returns an error wrapping the deadline as well as the session's end.
// The relay must start a new session, not take it for a wait to retry.
// That retry would spin on the dead session for ever, delivering nothing.
func TestPublishEndingTheSessionAtItsDeadlineStartsANewSession(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.broker.dieOnDeadline = true
	e.start(nil)
	first, lsn := e.insertTx(1, "before.stall")
	e.broker.waitPublished(t, 1)
	waitFor(t, 10*time.Second, "slot past the first transaction", func() bool { return e.slotLSN() > lsn })
	e.broker.block()
	second, _ := e.insertTx(2, "during.stall")
	e.broker.waitSessions(t, 2)
	e.broker.unblock()
	e.broker.waitPublished(t, 3)
	equalIDs(t, ids(e.broker.messages()), append(first, second...))
}

// A message the broker refuses every time it is sent stalls the stream there.
// Transient failures are never skipped.
// But the relay must neither replay from the slot at full speed, nor resend what the broker confirmed.
// It reports the confirmed transactions before the failure, even before the next status update is due.
// It backs off while the failing sessions make no progress.
func TestRepeatedRefusalBacksOffAndKeepsConfirmedProgress(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.broker.mu.Lock()
	e.broker.reject = func(m *wire.Message) bool { return m.EventType == "always.refused" }
	e.broker.mu.Unlock()
	e.start(func(c *replication.Config) {
		c.StatusInterval = 30 * time.Second // only the report at the failure can move the slot
		c.MaxBackoff = 2 * time.Second
	})
	_, good := e.insertTx(3, "fine")
	e.insertTx(1, "always.refused")
	waitFor(t, 10*time.Second, "slot past the confirmed transaction", func() bool { return e.slotLSN() > good })
	e.broker.waitSessions(t, 2)
	start, before := time.Now(), e.broker.sessionCount()
	time.Sleep(4 * time.Second)
	n := e.broker.sessionCount() - before
	t.Logf("%d sessions in %v while the broker refused the same message", n, time.Since(start).Round(time.Millisecond))
	if n > 8 {
		t.Errorf("%d sessions in 4s: the relay replays at full speed instead of backing off", n)
	}
	if got := countType(e.broker.messages(), "fine"); got != 3 {
		t.Errorf("the 3 rows of the confirmed transaction were published %d times in all, want 3: "+
			"the relay sent them again", got)
	}
}

func countType(ms []wire.Message, eventType string) int {
	n := 0
	for _, m := range ms {
		if m.EventType == eventType {
			n++
		}
	}
	return n
}

// Rows that can never become deliverable messages are parked, counted, and the stream moves on.
// The slot passes them only once the parked copies are confirmed.
func TestBadRowsAreParkedAndTheStreamMovesOn(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(false))
	ctx := context.Background()
	// A text payload column lets a row carry something that is not JSON.
	if _, err := e.conn.Exec(ctx, "ALTER TABLE outbox ALTER COLUMN payload TYPE text"); err != nil {
		t.Fatal(err)
	}
	e.broker.refuse = func(m *wire.Message) bool { return m.EventType == "too.big" }
	e.start(nil)
	good1, _ := e.insertTx(1, "good.one")
	empty, _ := e.insertTx(1, "")
	notJSON := uuid.New()
	if _, err := e.conn.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ($1, 'order', '1', 'bad.json', 'not json')`, notJSON); err != nil {
		t.Fatal(err)
	}
	big, _ := e.insertTx(1, "too.big")
	good2, before := e.insertTx(1, "good.two")

	e.broker.waitPublished(t, 2)
	waitFor(t, 10*time.Second, "three parked", func() bool { return len(e.broker.parkedMessages()) == 3 })
	if e.slotLSN() > before {
		t.Fatal("slot moved before the parked messages were confirmed")
	}
	e.broker.ackAll()
	waitFor(t, 10*time.Second, "slot past the last row", func() bool { return e.slotLSN() > before })

	equalIDs(t, ids(e.broker.messages()), append(good1, good2...))
	parked := e.broker.parkedMessages()
	wantParked := []uuid.UUID{empty[0], notJSON, big[0]}
	for i, p := range parked {
		if p.Message.ID != wantParked[i] || p.Reason == "" || p.Table != "public.outbox" || p.LSN == "" {
			t.Errorf("parked %d = %+v, want id %s with a reason, table and LSN", i, p, wantParked[i])
		}
	}
	if !strings.Contains(parked[1].Reason, "JSON") {
		t.Errorf("reason for the non-JSON payload = %q", parked[1].Reason)
	}
	if got := e.relay.Stats().Parked.Load(); got != 3 {
		t.Errorf("parked counter = %d, want 3", got)
	}
}

func TestFatalErrorIsReturnedWhenTheContextEndsWithIt(t *testing.T) {
	b := newFakeBroker(true)
	e := setup(t, testenv.SharedPostgres(t), b)
	// The broker is never reached (a permanent error), and the stop comes at the same moment.
	e.start(func(c *replication.Config) {
		c.Dial = func(context.Context) (replication.Publisher, error) {
			e.cancel()
			return nil, errors.New("dial tcp 127.0.0.1:1: connection refused")
		}
	})
	err := e.wait(20 * time.Second)
	if err == nil || replication.Retryable(err) {
		t.Fatalf("Run = %v, want the permanent error", err)
	}
}

func TestShutdownAppliesConfirmsThatArrivedDuringAStalledPublish(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(false))
	e.start(func(c *replication.Config) { c.ShutdownTimeout = 300 * time.Millisecond })
	_, beforeA := e.insertTx(1, "a")
	e.broker.waitPublished(t, 1)
	// The next publish is blocked by the broker.
	// Meanwhile the broker confirms the first message, and the confirm waits unread behind the stalled publish.
	e.broker.block()
	defer e.broker.unblock()
	e.insertTx(1, "b")
	time.Sleep(300 * time.Millisecond)
	e.broker.ack(1)
	time.Sleep(100 * time.Millisecond)
	if err := e.stop(); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	// The server applies the last status update on its own time, after the relay closed.
	waitFor(t, 5*time.Second, "slot past the confirmed transaction after shutdown", func() bool { return e.slotLSN() > beforeA })
}

func TestPositionIDsNameTheServersSystemAndTimeline(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.start(func(c *replication.Config) {
		c.Mappings = []wire.Mapping{{Table: wire.DefaultTable, MessageID: wire.IDFromPosition}}
	})
	// A second slot, of test_decoding, tells the transaction's commit time.
	ctx := context.Background()
	side := e.pg.Conn(t, e.db)
	if _, err := side.Exec(ctx, "SET TimeZone = 'UTC'"); err != nil {
		t.Fatal(err)
	}
	times := testenv.UniqueName("times")
	if _, err := side.Exec(ctx, "SELECT pg_catalog.pg_create_logical_replication_slot($1, 'test_decoding', true)", times); err != nil {
		t.Fatal(err)
	}
	_, before := e.insertTx(1, "by.position")
	after := e.currentLSN()
	got := e.broker.waitPublished(t, 1)[0].ID
	// The relay's own records are transactions of this database too: take the commit of the insert.
	rows, err := side.Query(ctx, "SELECT data FROM pg_catalog.pg_logical_slot_peek_changes($1, NULL, NULL, 'include-timestamp', '1')", times)
	if err != nil {
		t.Fatal(err)
	}
	var commit string
	inserted := false
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasPrefix(data, "BEGIN"):
			inserted = false
		case strings.HasPrefix(data, "table "+wire.DefaultTable.String()+": INSERT"):
			inserted = true
		case strings.HasPrefix(data, "COMMIT") && inserted && commit == "":
			commit = data
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if commit == "" {
		t.Fatal("test_decoding shows no commit of an insert into the outbox table")
	}
	_, stamp, _ := strings.Cut(strings.TrimSuffix(commit, ")"), "(at ")
	at, err := time.Parse("2006-01-02 15:04:05.999999-07", stamp)
	if err != nil {
		t.Fatalf("commit time of %q: %v", commit, err)
	}

	var origin decoder.Origin
	if err := e.conn.QueryRow(ctx, "SELECT system_identifier::text::numeric FROM pg_control_system()").Scan(&origin.SystemID); err != nil {
		t.Fatal(err)
	}
	if err := e.conn.QueryRow(ctx, "SELECT timeline_id FROM pg_control_checkpoint()").Scan(&origin.Timeline); err != nil {
		t.Fatal(err)
	}
	if origin.Timeline != 1 {
		t.Skipf("the server is on timeline %d; the test reckons without a history", origin.Timeline)
	}
	// The commit record lies between the two positions: one of them is the transaction's.
	for lsn := before; lsn <= after; lsn++ {
		switch got {
		case origin.PositionID(lsn, at, 0):
			return
		case decoder.PositionID(lsn, 0):
			t.Fatalf("id %v names the position %s only, not the server's system %d and timeline %d", got, lsn, origin.SystemID, origin.Timeline)
		}
	}
	t.Fatalf("id %v is no position id of a commit between %s and %s at %s on system %d", got, before, after, at, origin.SystemID)
}

// A single publish may take three times wal_sender_timeout: a large message written to a slow broker.
// The write does not heed its context.
// It must not let the server drop the session: it would be replayed, and dropped again, for ever.
func TestLongPublishKeepsTheSessionAlive(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.WithSetting("wal_sender_timeout", "1s"))
	testenv.RequireOwn(t, pg)
	e := setup(t, pg, newFakeBroker(true))
	e.broker.slowWrite = 3 * time.Second
	e.start(nil)
	want, before := e.insertTx(1, "large")
	waitFor(t, 20*time.Second, "slot past the slowly written message", func() bool { return e.slotLSN() > before })
	if n := e.broker.sessionCount(); n != 1 {
		t.Fatalf("%d sessions: the long publish let the server drop the replication session", n)
	}
	equalIDs(t, ids(e.broker.messages()), want)
}

// The same goes when the long write is a Flush of what the publisher kept back, not a Publish.
func TestLongFlushKeepsTheSessionAlive(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.WithSetting("wal_sender_timeout", "1s"))
	testenv.RequireOwn(t, pg)
	b := newFakeBroker(true)
	b.keepUntilFlush = true
	b.slowFlush = 3 * time.Second
	e := setup(t, pg, b)
	e.start(nil)
	want, before := e.insertTx(1, "kept")
	waitFor(t, 20*time.Second, "slot past the slowly flushed message", func() bool { return e.slotLSN() > before })
	if n := e.broker.sessionCount(); n != 1 {
		t.Fatalf("%d sessions: the long flush let the server drop the replication session", n)
	}
	equalIDs(t, ids(e.broker.messages()), want)
}

// A message the broker refuses every time (here returned as unroutable) stalls the stream.
// But each retry must send only that message, not again the whole window published behind it.
// Those messages would reach consumers at every retry. The relay says it is stalled, and once the message
// passes, the window opens again.
func TestRefusedMessageStallsWithoutReplayingTheWindow(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(false))
	var mu sync.Mutex
	refuse := true
	verdict := func(m *wire.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if refuse && m.EventType == "unroutable" {
			return errors.New("fake: message returned: 312 NO_ROUTE")
		}
		return nil
	}
	// Every row is committed, and the first session has published them all, before the broker answers.
	// A row the first session had not read yet would wait behind the refused one.
	// It would never be published before that one passes. The broker then answers whatever is pending every
	// 50 ms, long after the relay sent it.
	e.insertTx(1, "before")
	e.insertTx(1, "unroutable")
	const behind = 20
	var behindIDs []uuid.UUID
	for range behind {
		id, _ := e.insertTx(1, "behind")
		behindIDs = append(behindIDs, id...)
	}
	e.start(func(c *replication.Config) { c.MaxBackoff = 100 * time.Millisecond })
	e.broker.waitPublished(t, 2+behind)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			if e.broker.sessionCount() > 0 {
				e.broker.judge(verdict)
			}
		}
	}()
	e.broker.waitSessions(t, 5)
	if got := countType(e.broker.messages(), "behind"); got != behind {
		t.Errorf("the %d messages behind the refused one were published %d times in all, want once each: "+
			"every retry replays the window", behind, got)
	}
	if st := replication.State(e.relay.Stats().State.Load()); st != replication.StateStalled {
		t.Errorf("state %s while the broker refuses a message, want stalled", st)
	}
	if got := e.relay.Stats().LastError(); !strings.Contains(got, "NO_ROUTE") {
		t.Errorf("last error %q does not say why the message is refused", got)
	}

	// Every row behind the refused one is published again once it passes. (The count is taken
	// outside mu: the judge has the broker's lock while it asks verdict, which takes mu.)
	n0 := len(e.broker.messages())
	mu.Lock()
	refuse = false
	mu.Unlock()
	waitFor(t, 20*time.Second, "every message after the refused one delivered", func() bool {
		again := map[uuid.UUID]bool{}
		for _, id := range ids(e.broker.messages()[n0:]) {
			again[id] = true
		}
		for _, id := range behindIDs {
			if !again[id] {
				return false
			}
		}
		return true
	})
	waitFor(t, 10*time.Second, "streaming again", func() bool {
		return replication.State(e.relay.Stats().State.Load()) == replication.StateStreaming
	})
}

// A relay blocked in a publish (the broker blocks publishers) loses its replication connection.
// The walsender is terminated, and a standby takes the slot over within moments.
// The old relay must stop publishing at once.
// Were it to publish the row it kept once the broker lets it, it would race the standby.
// The standby sends the same rows again.
func TestRelayThatLostItsConnectionStopsPublishing(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.start(func(c *replication.Config) { c.StatusInterval = time.Second })
	_, before := e.insertTx(1, "before")
	waitFor(t, 10*time.Second, "slot past the first row", func() bool { return e.slotLSN() > before })
	e.broker.block()
	e.broker.mu.Lock()
	e.broker.dialErr = errors.New("fake: broker unreachable") // the old relay gets no new session
	e.broker.mu.Unlock()
	kept, _ := e.insertTx(1, "kept")
	time.Sleep(500 * time.Millisecond) // the relay is blocked in the publish

	ctx := context.Background()
	if _, err := e.conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
		WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.slot); err != nil {
		t.Fatal(err)
	}
	standby := &env{t: t, pg: e.pg, db: e.db, conn: e.conn, slot: e.slot, broker: newFakeBroker(true)}
	standby.start(nil)
	equalIDs(t, ids(standby.broker.waitPublished(t, 1)), kept)

	e.broker.unblock()
	time.Sleep(500 * time.Millisecond)
	if n := countType(e.broker.messages(), "kept"); n != 0 {
		t.Fatalf("the relay that lost its replication connection published the kept row %d times, "+
			"after a standby had taken the slot over", n)
	}
}

// The server decodes one large transaction of a table outside the publication.
// While it does, it reads the relay's replies only every half wal_sender_timeout.
// Only then does it answer a request for a reply.
// Here that is half the shared server's, a minute.
// A server timeout configured below that would take the live walsender for dead.
// The replay would then decode the same transaction again, for ever.
func TestTooSmallServerTimeoutIsRaised(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	ctx := context.Background()
	if _, err := e.conn.Exec(ctx, "CREATE TABLE bulk (n int, pad text)"); err != nil {
		t.Fatal(err)
	}
	e.start(func(c *replication.Config) { c.ServerTimeout = 3 * c.StatusInterval })
	_, before := e.insertTx(1, "first")
	waitFor(t, time.Minute, "first row confirmed", func() bool { return e.slotLSN() > before })
	if _, err := e.conn.Exec(ctx, "INSERT INTO bulk SELECT n, repeat('x', 100) FROM generate_series(1, 400000) n"); err != nil {
		t.Fatal(err)
	}
	want, after := e.insertTx(1, "after.bulk")
	waitFor(t, 60*time.Second, "the row after the large transaction confirmed", func() bool { return e.slotLSN() > after })
	if n := e.relay.Stats().Sessions.Load(); n != 1 {
		t.Errorf("%d sessions: the relay took the walsender decoding a large transaction for dead (last error: %s)",
			n, e.relay.Stats().LastError())
	}
	if got := e.broker.messages(); got[len(got)-1].ID != want[0] {
		t.Errorf("last message %s, want the row after the large transaction", got[len(got)-1].ID)
	}
}

// A publisher without a schedule (a stream's) gets a row due after its commit parked, with the
// reason; a row due at or before its commit is published as any other.
func TestRowDueLaterIsParkedWithoutAScheduler(t *testing.T) {
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.start(nil)
	later, past := uuid.New(), uuid.New()
	if _, err := e.conn.Exec(context.Background(), `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, deliver_at)
		VALUES ($1, 'order', '1', 'order.reminder', '{}', pg_catalog.now() + interval '1 hour'),
		       ($2, 'order', '1', 'order.reminder', '{}', pg_catalog.now() - interval '1 second')`, later, past); err != nil {
		t.Fatal(err)
	}
	equalIDs(t, ids(e.broker.waitPublished(t, 1)), []uuid.UUID{past})
	waitFor(t, 10*time.Second, "one parked", func() bool { return len(e.broker.parkedMessages()) == 1 })
	p := e.broker.parkedMessages()[0]
	if p.Message.ID != later || !strings.Contains(p.Reason, "stream keeps commit order") || p.Message.DeliverAt.IsZero() {
		t.Errorf("parked %+v, want %s due later with the stream's reason", p, later)
	}
}

// A standby takes the slot over within moments of its release, not at its next StandbyRetry. It
// watches the slot in between.
func TestStandbyTakesOverLongBeforeItsNextRetry(t *testing.T) {
	e, first, standby, s := activeAndStandby(t, func(c *replication.Config) { c.StandbyRetry = time.Minute })
	waitFor(t, 30*time.Second, "the second relay a standby", func() bool {
		return replication.State(s.relay.Stats().State.Load()) == replication.StateStandby
	})
	first()
	want, _ := e.insertTx(1, "two")
	got := standby.waitPublished(t, 1) // fails after 30 s: a standby that did not watch would wait a minute
	equalIDs(t, ids(got[len(got)-1:]), want)
}

// activeAndStandby starts a relay that publishes a row, then a second relay on its slot, edited by
// edit. It returns the first's env and its stop, and the second's broker and env.
func activeAndStandby(t *testing.T, edit func(*replication.Config)) (*env, context.CancelFunc, *fakeBroker, *env) {
	t.Helper()
	e := setup(t, testenv.SharedPostgres(t), newFakeBroker(true))
	e.start(nil)
	e.insertTx(1, "one")
	e.broker.waitPublished(t, 1)
	standby := newFakeBroker(true)
	s := &env{t: t, pg: e.pg, db: e.db, conn: e.conn, slot: e.slot, broker: standby}
	s.start(edit)
	return e, e.cancel, standby, s
}
