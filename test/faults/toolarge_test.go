package faults_test

import (
	"context"
	"crypto/md5"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
)

// A row the broker refuses for its size (RabbitMQ 4.0's max_message_size is 16 MiB; here a node
// set to 1 MiB, with walbox's own limit above it) closes the channel with a 406. walbox works out
// which row it was, parks it with the broker's reason, and delivers the rows after it, in order.
// The slot passes the row once its parked copy is confirmed. A process killed once it knows the
// row remembers nothing: the next one meets the same refusal and parks the same row.
func TestRowsTheBrokerRefusesForSizeAreParked(t *testing.T) {
	heavy(t)
	rabbit := testenv.StartRabbitConf(t, "max_message_size = 1048576")
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	const big = 2 << 20

	// Written before the relay starts, so that the refused row is one of several in flight.
	var want []string
	small := func(tx pgx.Tx) {
		id := uuid.NewString()
		if _, err := tx.Exec(context.Background(), `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1, 'order', '1', 'order.created', '{}')`, id); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	large := func(tx pgx.Tx) string {
		id := uuid.NewString()
		if _, err := tx.Exec(context.Background(), `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1, 'order', '1', 'order.huge', jsonb_build_object('x', repeat('y', $2)))`, id, big); err != nil {
			t.Fatal(err)
		}
		return id
	}
	w.inTx(func(tx pgx.Tx) { small(tx); small(tx); small(tx) })
	var first string
	w.inTx(func(tx pgx.Tx) { small(tx); first = large(tx); small(tx) })
	w.inTx(func(tx pgx.Tx) { small(tx); small(tx); small(tx) })
	end := w.walLSN()

	r := w.startRelay("WALBOX_MAX_MESSAGE_SIZE=4194304")
	got := w.uniqueIDs(len(want), time.Minute)
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	w.expectParkedTooLarge(first)
	waitFor(t, 30*time.Second, "the slot past the refused row", func() bool { return w.confirmedLSN() >= end })
	if code := r.Stop(time.Minute); code != 0 {
		t.Fatalf("walbox exited %d:\n%s", code, r.Output())
	}

	// A process killed once it knows which row to park, before it may have parked it: the next
	// one, which knows nothing, meets the same refusal and parks the same row.
	want = want[:0]
	var second string
	w.inTx(func(tx pgx.Tx) { small(tx); second = large(tx); small(tx) })
	r = w.startRelay("WALBOX_MAX_MESSAGE_SIZE=4194304")
	r.WaitFor("the refused row pinned", time.Minute, func() bool {
		return strings.Contains(r.Output(), "refused a message for its size; parking it")
	})
	r.Kill()
	r = w.startRelay("WALBOX_MAX_MESSAGE_SIZE=4194304")
	if got := w.uniqueIDs(len(want), time.Minute); !slices.Equal(got, want) {
		t.Fatalf("after a restart, delivered %v, want %v", got, want)
	}
	w.expectParkedTooLarge(second)
	if !strings.Contains(r.Output(), "refused a message for its size; parking it") {
		t.Errorf("the new process did not find the refused row itself:\n%s", r.Output())
	}
}

// inTx runs f in one transaction of the world's connection and commits it.
func (w *world) inTx(f func(tx pgx.Tx)) {
	w.t.Helper()
	tx, err := w.conn.Begin(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	f(tx)
	if err := tx.Commit(context.Background()); err != nil {
		w.t.Fatal(err)
	}
}

// uniqueIDs consumes the world's queue until n distinct message ids arrived, and returns them in
// the order of their first delivery: a row sent again (at least once) counts once.
func (w *world) uniqueIDs(n int, timeout time.Duration) []string {
	w.t.Helper()
	conn, ch := dialAMQP(w.t, w.rabbit.URL())
	defer conn.Close()
	var ids []string
	waitFor(w.t, timeout, fmt.Sprintf("%d messages", n), func() bool {
		for {
			d, ok, err := ch.Get(w.queue, true)
			if err != nil {
				w.t.Fatal(err)
			}
			if !ok {
				return len(ids) >= n
			}
			if !slices.Contains(ids, d.MessageId) {
				ids = append(ids, d.MessageId)
			}
		}
	})
	return ids
}

// expectParkedTooLarge checks that the park queue holds the row id and nothing else (a copy
// parked by a killed process may be there twice), without its payload, with the broker's reason.
func (w *world) expectParkedTooLarge(id string) {
	w.t.Helper()
	var parked []amqp.Delivery
	waitFor(w.t, 30*time.Second, "the parked row", func() bool {
		w.eachInQueue(w.exchange+".parked", func(d amqp.Delivery) { parked = append(parked, d) })
		return len(parked) > 0
	})
	for _, d := range parked {
		reason := fmt.Sprint(d.Headers["x-walbox-reason"])
		switch {
		case d.MessageId != id:
			w.t.Errorf("parked %s, want only %s", d.MessageId, id)
		case !strings.Contains(reason, "larger than configured max size 1048576"):
			w.t.Errorf("parked with reason %q, want the broker's", reason)
		case len(d.Body) != 0:
			w.t.Errorf("parked with a body of %d bytes, which the broker refuses", len(d.Body))
		}
	}
}

// Peak memory is bounded by the largest row, not by how many large rows wait in the slot: walbox's
// high-water RSS (VmHWM) stays within twice the largest row plus a fixed base, for one row of 16
// MiB, one of 64 MiB, and 40 rows of 4 MiB committed together. Those 160 MiB are three times the
// bound; a reader that reads ahead 16 MiB of copies passes it. The figures are in
// docs/bench/large-rows.md.
func TestLargeRowsPeakMemory(t *testing.T) {
	heavy(t)
	pg, rabbit := testenv.SharedPostgres(t), testenv.SharedRabbit(t)
	// Without the race detector, whose shadow memory would be measured too.
	t.Setenv("WALBOX_FAULTS_BIN", testenv.Build(t, "cmd/walbox"))
	const base = 48 << 20
	for _, tt := range []struct {
		name       string
		rows, size int
	}{
		{"one row of 16 MiB", 1, 16 << 20},
		{"one row of 64 MiB", 1, 64 << 20},
		{"40 rows of 4 MiB in one transaction", 40, 4 << 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, pg, rabbit)
			w.inTx(func(tx pgx.Tx) {
				// The payload is exactly size bytes: jsonb prints {"x": "..."} around the text.
				// Row g repeats the letter g % 26, so that a body holding another row's bytes shows.
				if _, err := tx.Exec(context.Background(), `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
					SELECT 'order', '1', 'order.big', jsonb_build_object('x', repeat(chr(65 + g % 26), $2))
					FROM generate_series(0, $1 - 1) g`, tt.rows, tt.size-9); err != nil {
					t.Fatal(err)
				}
			})
			end := w.walLSN()
			checked := w.consumeBodies(tt.rows, tt.size)
			r := w.startRelay("WALBOX_MAX_MESSAGE_SIZE=" + fmt.Sprint(64<<20))
			waitFor(t, 5*time.Minute, "the slot past the rows", func() bool { return w.confirmedLSN() >= end })
			select {
			case err := <-checked:
				if err != nil {
					t.Error(err)
				}
			case <-time.After(2 * time.Minute):
				t.Error("the bodies did not all arrive")
			}
			peak, err := r.peakRSS()
			if err != nil {
				t.Fatal(err)
			}
			st := mustStatus(t, r)
			t.Logf("SUMMARY %s rows=%d size_mib=%d peak_rss_mib=%.1f confirmed=%d parked=%d", t.Name(), tt.rows,
				tt.size>>20, float64(peak)/(1<<20), st.Confirmed, st.Parked)
			if st.Parked != 0 || st.Confirmed < uint64(tt.rows) {
				t.Errorf("confirmed %d and parked %d, want %d confirmed", st.Confirmed, st.Parked, tt.rows)
			}
			if limit := int64(2*tt.size + base); peak > limit {
				t.Errorf("peak RSS %.1f MiB, want at most %.1f MiB (twice the row plus %d MiB)",
					float64(peak)/(1<<20), float64(limit)/(1<<20), base>>20)
			}
		})
	}
}

// consumeBodies consumes the world's queue as the rows arrive, so that the broker holds few, and
// checks that the i-th body is the payload of row i: {"x": "..."} around size-9 times the letter
// i % 26. The channel yields the first mismatch, or nil once n bodies passed.
func (w *world) consumeBodies(n, size int) <-chan error {
	w.t.Helper()
	conn, ch := dialAMQP(w.t, w.rabbit.URL())
	w.t.Cleanup(func() { conn.Close() })
	if err := ch.Qos(2, 0, false); err != nil {
		w.t.Fatal(err)
	}
	deliveries, err := ch.Consume(w.queue, "", false, true, false, false, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	out := make(chan error, 1)
	go func() {
		for i := range n {
			d, ok := <-deliveries
			if !ok {
				out <- fmt.Errorf("consumer closed after %d of %d bodies", i, n)
				return
			}
			letter := string(rune('A' + i%26))
			want := len(d.Body) == size && string(d.Body[:7]) == `{"x": "` && string(d.Body[size-2:]) == `"}` &&
				strings.Count(string(d.Body[7:size-2]), letter) == size-9
			if !want {
				out <- fmt.Errorf("body %d: %d bytes starting %.12q, want %d bytes of %s", i, len(d.Body), d.Body, size, letter)
				return
			}
			if err := d.Ack(false); err != nil {
				out <- err
				return
			}
		}
		out <- nil
	}()
	return out
}

// Two rows the broker refuses for size in one transaction: the slot restarts at the
// transaction's start, so each replay meets the first row again. Both are parked, the rows
// around them delivered, and the slot passes the transaction: parking the second must not make
// the relay forget the first and publish it again, for ever.
func TestTwoRowsRefusedForSizeInOneTransaction(t *testing.T) {
	heavy(t)
	rabbit := testenv.StartRabbitConf(t, "max_message_size = 1048576")
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	var want, big []string
	insert := func(tx pgx.Tx, size int) string {
		id := uuid.NewString()
		if _, err := tx.Exec(context.Background(), `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1, 'order', '1', 'order.x', jsonb_build_object('x', repeat('y', $2)))`, id, size); err != nil {
			t.Fatal(err)
		}
		return id
	}
	w.inTx(func(tx pgx.Tx) {
		want = append(want, insert(tx, 1))
		big = append(big, insert(tx, 2<<20))
		want = append(want, insert(tx, 1))
		big = append(big, insert(tx, 2<<20))
		want = append(want, insert(tx, 1))
	})
	end := w.walLSN()
	r := w.startRelay("WALBOX_MAX_MESSAGE_SIZE=4194304")
	waitFor(t, 2*time.Minute, "the slot past the transaction", func() bool { return w.confirmedLSN() >= end })
	if got := w.uniqueIDs(len(want), 30*time.Second); !slices.Equal(got, want) {
		t.Errorf("delivered %v, want %v", got, want)
	}
	var parked []string
	w.eachInQueue(w.exchange+".parked", func(d amqp.Delivery) {
		if !slices.Contains(parked, d.MessageId) {
			parked = append(parked, d.MessageId)
		}
	})
	if !slices.Equal(parked, big) {
		t.Errorf("parked %v, want %v", parked, big)
	}
	if code := r.Stop(time.Minute); code != 0 {
		t.Fatalf("walbox exited %d:\n%s", code, r.Output())
	}
}

// walbox recover republishes a gap that holds a row the broker refuses for its size: it parks
// that row without its payload, with the broker's reason, as walbox run does, and republishes
// the rest. Without that, every recover failed on the broker's 406, and the slot stayed stopped.
func TestRecoverParksARowTheBrokerRefusesForSize(t *testing.T) {
	heavy(t)
	rabbit := testenv.StartRabbitConf(t, "max_message_size = 1048576")
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	const limit = "WALBOX_MAX_MESSAGE_SIZE=4194304"
	r := w.startRelay(limit)
	r.waitState("streaming", time.Minute)
	w.dropSlot()
	w.expectRefusal(r, "will not recreate")
	insert := func(tx pgx.Tx, size int) string {
		id := uuid.NewString()
		if _, err := tx.Exec(context.Background(), `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1, 'order', '1', 'order.x', jsonb_build_object('x', repeat('y', $2)))`, id, size); err != nil {
			t.Fatal(err)
		}
		return id
	}
	var want []string
	var big string
	w.inTx(func(tx pgx.Tx) {
		want = append(want, insert(tx, 1))
		big = insert(tx, 2<<20)
		want = append(want, insert(tx, 1))
	})
	out, code := w.walbox([]string{limit}, "recover")
	if code != 0 {
		t.Fatalf("walbox recover exited %d:\n%s", code, out)
	}
	got := w.uniqueIDs(len(want), 30*time.Second)
	for _, id := range want {
		if !slices.Contains(got, id) {
			t.Errorf("row %s not republished; got %v", id, got)
		}
	}
	if slices.Contains(got, big) {
		t.Errorf("the refused row %s was delivered", big)
	}
	w.expectParkedTooLarge(big)
}

// Large rows are read without a copy: the payload shares the replication connection's buffer
// until the row is published. Large and small rows and walbox_emit messages, interleaved in
// transactions, over two lanes, with a row over the broker's limit among them: every body
// delivered is its row's payload byte for byte (a buffer reused too early would show another
// row's bytes), and the row over the limit is parked. The binary runs with the race detector.
func TestInterleavedLargeRowsArriveByteForByte(t *testing.T) {
	heavy(t)
	rabbit := testenv.StartRabbitConf(t, "max_message_size = 4194304")
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	want := map[string]string{} // id -> body
	var huge []string
	body := func(id string, size int) string {
		sum := fmt.Sprintf("%x", md5.Sum([]byte(id)))
		return `{"x": "` + strings.Repeat(sum, size/len(sum)+1)[:size] + `"}`
	}
	n := 0
	row := func(tx pgx.Tx, size int, emit bool) string {
		n++
		id := uuid.NewString()
		b := body(id, size)
		q := `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'order', $2, 'order.x', $3)`
		if emit {
			q = `SELECT walbox_emit('order', $2, 'order.x', $3::jsonb, '{}', $1)`
		}
		if _, err := tx.Exec(context.Background(), q, id, fmt.Sprint(n%7), b); err != nil {
			t.Fatal(err)
		}
		return id
	}
	for range 3 {
		w.inTx(func(tx pgx.Tx) {
			for _, r := range []struct {
				size int
				emit bool
			}{{100, false}, {200, true}, {3 << 19, false}, {150, false}, {5 << 18, true}, {3 << 20, false}, {10, false}} {
				id := row(tx, r.size, r.emit)
				want[id] = body(id, r.size)
			}
			huge = append(huge, row(tx, 5<<20, false))
			id := row(tx, 120, false)
			want[id] = body(id, 120)
		})
	}
	end := w.walLSN()
	r := w.startRelay("WALBOX_MAX_MESSAGE_SIZE=8388608", "WALBOX_LANES=2")
	waitFor(t, 2*time.Minute, "the slot past the rows", func() bool { return w.confirmedLSN() >= end })
	got := map[string]bool{}
	w.eachInQueue(w.queue, func(d amqp.Delivery) {
		got[d.MessageId] = true
		b, ok := want[d.MessageId]
		switch {
		case !ok:
			t.Errorf("delivered %s, which is no row of the test", d.MessageId)
		case string(d.Body) != b:
			t.Errorf("message %s: body of %d bytes differs from its row's %d bytes", d.MessageId, len(d.Body), len(b))
		}
	})
	for id := range want {
		if !got[id] {
			t.Errorf("row %s not delivered", id)
		}
	}
	parked := map[string]bool{}
	w.eachInQueue(w.exchange+".parked", func(d amqp.Delivery) { parked[d.MessageId] = true })
	for _, id := range huge {
		if !parked[id] {
			t.Errorf("row %s over the broker's limit not parked", id)
		}
	}
	if code := r.Stop(time.Minute); code != 0 {
		t.Fatalf("walbox exited %d:\n%s", code, testenv.Tail(r.Output(), 30))
	}
}

// Ten rows the broker refuses for size in one transaction: each replay of the transaction finds
// one more. Finding one is progress, so the relay starts the next session at once instead of
// backing off ever longer (which summed to minutes); every row around them is delivered.
func TestManyRowsRefusedForSizeDoNotBackOff(t *testing.T) {
	heavy(t)
	rabbit := testenv.StartRabbitConf(t, "max_message_size = 1048576")
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	var want []string
	insert := func(tx pgx.Tx, size int) string {
		id := uuid.NewString()
		if _, err := tx.Exec(context.Background(), `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1, 'order', '1', 'order.x', jsonb_build_object('x', repeat('y', $2)))`, id, size); err != nil {
			t.Fatal(err)
		}
		return id
	}
	w.inTx(func(tx pgx.Tx) {
		for range 10 {
			want = append(want, insert(tx, 1))
			insert(tx, 2<<20)
		}
		want = append(want, insert(tx, 1))
	})
	end := w.walLSN()
	r := w.startRelay("WALBOX_MAX_MESSAGE_SIZE=4194304")
	waitFor(t, 3*time.Minute, "the slot past the transaction", func() bool { return w.confirmedLSN() >= end })
	if got := w.uniqueIDs(len(want), 30*time.Second); !slices.Equal(got, want) {
		t.Errorf("delivered %v, want %v", got, want)
	}
	if code := r.Stop(time.Minute); code != 0 {
		t.Fatalf("walbox exited %d:\n%s", code, r.Output())
	}
	waits := retryIn.FindAllStringSubmatch(r.Output(), -1)
	if len(waits) < 10 {
		t.Fatalf("%d sessions ended; want one per refused row at least:\n%s", len(waits), testenv.Tail(r.Output(), 20))
	}
	for _, m := range waits {
		if d, err := time.ParseDuration(m[1]); err != nil || d >= time.Second {
			t.Errorf("a session after a refusal for size waited %s (%v); want it to start at once", m[1], err)
		}
	}
}

// retryIn is how long walbox waits before its next session.
var retryIn = regexp.MustCompile(`retry_in=(\S+)`)
