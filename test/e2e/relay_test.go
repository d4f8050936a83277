package e2e_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/walbox/walbox/internal/testenv"
)

// writeMixed commits total rows in transactions of random sizes between 1 and maxTx.
func (w *world) writeMixed(total, maxTx int, seed uint64) []txn {
	w.t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	var txns []txn
	for left := total; left > 0; {
		n := min(left, 1+rng.IntN(maxTx))
		txns = append(txns, w.insertTx(w.conn, n, "order.created"))
		left -= n
	}
	return txns
}

func TestTenThousandRowsInCommitOrder(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	// 10,000 rows in 200 transactions of 1 to 200 rows: sizes drawn at random, then scaled.
	rng := rand.New(rand.NewPCG(42, 2))
	sizes := make([]int, 200)
	sum := 0
	for i := range sizes {
		sizes[i] = 1 + rng.IntN(200)
		sum += sizes[i]
	}
	total := 0
	for i := range sizes {
		sizes[i] = max(1, min(200, sizes[i]*10000/sum))
		total += sizes[i]
	}
	for i := 0; total < 10000; i = (i + 1) % len(sizes) {
		if sizes[i] < 200 {
			sizes[i]++
			total++
		}
	}
	var txns []txn
	for _, n := range sizes {
		txns = append(txns, w.insertTx(w.conn, n, "order.created"))
	}

	start := time.Now()
	w.startRelay()
	got := w.drain(txns, nil, 2*time.Minute)
	elapsed := time.Since(start)
	t.Logf("10,000 messages in %d transactions relayed in %v: %.0f msg/s (including relay start-up)",
		len(txns), elapsed.Round(time.Millisecond), 10000/elapsed.Seconds())

	want := allIDs(txns)
	if len(got) != len(want) {
		t.Fatalf("got %d deliveries, want %d (duplicates without a failure)", len(got), len(want))
	}
	for i, d := range got {
		if d.MessageId != want[i].String() {
			t.Fatalf("delivery %d is %s, want %s: not in commit order", i, d.MessageId, want[i])
		}
	}
	w.checkProperties(got)
}

// checkProperties compares each delivery with its outbox row.
func (w *world) checkProperties(got []amqp.Delivery) {
	w.t.Helper()
	type row struct {
		aggType, aggID, eventType, payload string
		headers                            map[string]any
		created                            time.Time
	}
	rows := map[string]row{}
	res, err := w.conn.Query(context.Background(),
		"SELECT id::text, aggregate_type, aggregate_id, event_type, payload::text, headers, created_at FROM outbox")
	if err != nil {
		w.t.Fatal(err)
	}
	for res.Next() {
		var id string
		var r row
		if err := res.Scan(&id, &r.aggType, &r.aggID, &r.eventType, &r.payload, &r.headers, &r.created); err != nil {
			w.t.Fatal(err)
		}
		rows[id] = r
	}
	if err := res.Err(); err != nil {
		w.t.Fatal(err)
	}
	for _, d := range got {
		r, ok := rows[d.MessageId]
		if !ok {
			w.t.Fatalf("delivery %s has no outbox row", d.MessageId)
		}
		if string(d.Body) != r.payload {
			w.t.Fatalf("body %s, want the stored payload %s", d.Body, r.payload)
		}
		checks := []struct {
			name      string
			got, want any
		}{
			{"routing key", d.RoutingKey, r.eventType},
			{"Type", d.Type, r.eventType},
			{"ContentType", d.ContentType, "application/json"},
			{"DeliveryMode", d.DeliveryMode, amqp.Persistent},
			{"AppId", d.AppId, "walbox"},
			{"Timestamp", d.Timestamp.Unix(), r.created.Unix()},
			{"aggregate_type header", d.Headers["aggregate_type"], r.aggType},
			{"aggregate_id header", d.Headers["aggregate_id"], r.aggID},
			{"traceparent header", d.Headers["traceparent"], r.headers["traceparent"]},
			{"tenant header", d.Headers["tenant"], r.headers["tenant"]},
		}
		for _, c := range checks {
			if c.got != c.want {
				w.t.Fatalf("message %s: %s = %v, want %v", d.MessageId, c.name, c.got, c.want)
			}
		}
		if !json.Valid(d.Body) {
			w.t.Fatalf("body of %s is not JSON", d.MessageId)
		}
	}
}

func waitForLSN(t *testing.T, w *world, cond func(pglogrepl.LSN) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond(w.slotLSN()) {
		if time.Now().After(deadline) {
			t.Fatalf("slot stuck at %s", w.slotLSN())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SIGTERM with messages in flight: exit 0, the slot exactly at the last confirmed transaction,
// and a restart sends the rest without repeating anything.
func TestSIGTERMWithMessagesInFlight(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	txns := w.writeMixed(4000, 100, 9)
	r := w.startRelay()
	waitForLSN(t, w, func(l pglogrepl.LSN) bool { return l > txns[0].before })
	if code := r.Stop(30 * time.Second); code != 0 {
		t.Fatalf("walbox run exited %d after SIGTERM, want 0:\n%s", code, r.Output())
	}
	// The final status is in the walsender's socket when walbox exits; the slot shows it once the
	// walsender has read it, which it does before it lets go of the slot.
	w.waitSlotReleased(w.slot)
	slot := w.slotLSN()
	// Exactly the transactions the slot has passed were delivered: the final status came after
	// their confirms, and nothing past the slot counted as delivered.
	var confirmed, rest []txn
	for _, x := range txns {
		if x.before < slot {
			confirmed = append(confirmed, x)
		} else {
			rest = append(rest, x)
		}
	}
	// Beyond those, only messages of the one transaction the shutdown cut short may have been
	// published: reading stops mid-transaction, and such a transaction is sent again in full.
	if len(rest) == 0 {
		t.Fatal("the relay finished the whole backlog before SIGTERM; nothing was in flight")
	}
	cut := rest[0]
	got := w.drainQuiet(time.Second)
	checkCovered(t, confirmed, got)
	allowed := map[string]bool{}
	for _, id := range allIDs(append(confirmed, cut)) {
		allowed[id.String()] = true
	}
	seen := map[string]bool{}
	for _, d := range got {
		if !allowed[d.MessageId] {
			t.Fatalf("message %s was published, but the slot stopped before its transaction and the one after", d.MessageId)
		}
		if seen[d.MessageId] {
			t.Fatalf("message %s delivered twice without any failure", d.MessageId)
		}
		seen[d.MessageId] = true
	}
	t.Logf("SIGTERM after %d of %d transactions", len(confirmed), len(txns))
	w.startRelay()
	again := w.drain(rest, nil, time.Minute)
	if dups := checkAll(t, rest, again); dups != 0 {
		t.Fatalf("restart after a clean shutdown repeated %d messages", dups)
	}
}

// SIGTERM while the broker blocks the relay, with messages on the wire that it cannot confirm:
// walbox exits within --shutdown-timeout plus a second, having logged how many confirms it waits
// for and how many it gave up on; the slot stays at the confirmed transactions, and a restart
// after the alarm delivers every row.
func TestSIGTERMWhileTheBrokerBlocks(t *testing.T) { sigtermWhileBlocked(t) }

// The same with three lanes, each a connection the broker blocks on its own: the slot passes only
// what every lane had confirmed, and the exit is as bounded.
func TestSIGTERMWhileTheBrokerBlocksLanes(t *testing.T) { sigtermWhileBlocked(t, "WALBOX_LANES=3") }

func sigtermWhileBlocked(t *testing.T, env ...string) {
	rabbit := testenv.StartRabbit(t)
	testenv.RequireOwn(t, rabbit)
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	addr := testenv.FreeAddr(t)
	const shutdownTimeout = 3 * time.Second
	// The race detector's exit would add a second of its own (atexit_sleep_ms).
	r := w.startRelay(append(env, "WALBOX_LISTEN="+addr, "WALBOX_SHUTDOWN_TIMEOUT="+shutdownTimeout.String(), "GORACE=atexit_sleep_ms=0")...)
	waitHTTP(t, addr, "/readyz", "ready while streaming", func(code int, _ string) bool { return code == 200 })
	rabbit.MemoryAlarm(t, true)
	alarmed := true
	defer func() {
		if alarmed {
			rabbit.MemoryAlarm(t, false)
		}
	}()
	txns := w.writeMixed(2000, 100, 11)
	var st struct {
		BrokerBlocked bool  `json:"broker_blocked"`
		InFlight      int64 `json:"in_flight"`
	}
	waitHTTP(t, addr, "/status", "blocked with messages in flight", func(_ int, b string) bool {
		return json.Unmarshal([]byte(b), &st) == nil && st.BrokerBlocked && st.InFlight > 0
	})

	start := time.Now()
	if code := r.Stop(30 * time.Second); code != 0 {
		t.Fatalf("walbox run exited %d after SIGTERM, want 0:\n%s", code, r.Output())
	}
	if took := time.Since(start); took > shutdownTimeout+time.Second {
		t.Errorf("walbox run took %v to exit after SIGTERM with --shutdown-timeout %v, want at most a second more",
			took.Round(time.Millisecond), shutdownTimeout)
	}
	out := r.Output()
	waiting := regexp.MustCompile(`msg="shutdown: waiting for the broker to confirm[^"]*" slot=\S+ in_flight=([1-9][0-9]*) shutdown_timeout=3s`)
	gaveUp := regexp.MustCompile(`level=WARN msg="shutdown: gave up waiting for the broker[^"]*" slot=\S+ unconfirmed=([1-9][0-9]*) shutdown_timeout=3s`)
	if !waiting.MatchString(out) || !gaveUp.MatchString(out) {
		t.Errorf("the shutdown did not log the confirms it waits for and those it gave up on:\n%s", testenv.Tail(out, 20))
	}

	w.waitSlotReleased(w.slot) // the walsender has read the final status
	slot := w.slotLSN()
	rabbit.MemoryAlarm(t, false)
	alarmed = false
	// The final status carried only what the broker confirmed: every transaction the slot passed
	// is on the broker.
	got := w.drainQuiet(time.Second)
	var confirmed []txn
	for _, x := range txns {
		if x.before < slot {
			confirmed = append(confirmed, x)
		}
	}
	checkCovered(t, confirmed, got)
	w.startRelay(env...)
	got = append(got, w.drain(txns, got, 2*time.Minute)...)
	checkAll(t, txns, got)
}

// SIGTERM while a large row is stuck in a socket write to a blocked broker, which no context
// ends: at the shutdown deadline walbox cuts the connection rather than wait for its write
// timeout, and exits within --shutdown-timeout plus a second. The row arrives after a restart.
func TestSIGTERMWhileALargeRowIsStuckInABlockedBroker(t *testing.T) {
	rabbit := testenv.StartRabbit(t)
	testenv.RequireOwn(t, rabbit)
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	addr := testenv.FreeAddr(t)
	const shutdownTimeout = 3 * time.Second
	r := w.startRelay("WALBOX_LISTEN="+addr, "WALBOX_SHUTDOWN_TIMEOUT="+shutdownTimeout.String(), "GORACE=atexit_sleep_ms=0")
	waitHTTP(t, addr, "/readyz", "ready while streaming", func(code int, _ string) bool { return code == 200 })
	rabbit.MemoryAlarm(t, true)
	alarmed := true
	defer func() {
		if alarmed {
			rabbit.MemoryAlarm(t, false)
		}
	}()
	// The broker reads the publish, blocks the connection and stops reading: the rest of the
	// body fills the socket buffers, and the write waits.
	var id uuid.UUID
	err := w.conn.QueryRow(context.Background(), `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '1', 'order.created', jsonb_build_object('pad', repeat('x', 12 << 20))) RETURNING id`).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, addr, "/readyz", "blocked", func(code int, body string) bool { return strings.Contains(body, "blocked") })
	time.Sleep(500 * time.Millisecond)

	start := time.Now()
	if code := r.Stop(30 * time.Second); code != 0 {
		t.Fatalf("walbox run exited %d after SIGTERM, want 0:\n%s", code, r.Output())
	}
	if took := time.Since(start); took > shutdownTimeout+time.Second {
		t.Errorf("walbox run took %v to exit after SIGTERM with --shutdown-timeout %v, want at most a second more:\n%s",
			took.Round(time.Millisecond), shutdownTimeout, testenv.Tail(r.Output(), 15))
	}
	if !strings.Contains(r.Output(), "cutting the connection") {
		t.Errorf("the shutdown did not say it cut the blocked connection:\n%s", testenv.Tail(r.Output(), 15))
	}
	rabbit.MemoryAlarm(t, false)
	alarmed = false
	w.startRelay()
	w.drain([]txn{{ids: []uuid.UUID{id}}}, nil, 2*time.Minute)
}

// SIGTERM while the broker answers nothing (its process is stopped, as in a network partition),
// with messages in flight: walbox gives up at --shutdown-timeout and exits within a second more.
// It does not wait out the publisher's close timeout for a connection.close-ok that never comes.
// The slot stays where the broker confirmed, so a restart delivers every row.
func TestSIGTERMWhileTheBrokerIsFrozen(t *testing.T) {
	rabbit := testenv.StartRabbit(t)
	testenv.RequireOwn(t, rabbit)
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	addr := testenv.FreeAddr(t)
	const shutdownTimeout = 2 * time.Second
	r := w.startRelay("WALBOX_LISTEN="+addr, "WALBOX_SHUTDOWN_TIMEOUT="+shutdownTimeout.String(), "GORACE=atexit_sleep_ms=0")
	waitHTTP(t, addr, "/readyz", "ready while streaming", func(code int, _ string) bool { return code == 200 })
	before := w.insertTx(w.conn, 5, "order.created")
	got := w.drain([]txn{before}, nil, time.Minute)

	pid := rabbit.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := true
	thaw := func() {
		if frozen {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			frozen = false
		}
	}
	defer thaw()
	during := w.insertTx(w.conn, 5, "order.created")
	var st struct {
		InFlight int64 `json:"in_flight"`
	}
	waitHTTP(t, addr, "/status", "messages in flight", func(_ int, b string) bool {
		return json.Unmarshal([]byte(b), &st) == nil && st.InFlight > 0
	})

	start := time.Now()
	if code := r.Stop(30 * time.Second); code != 0 {
		t.Fatalf("walbox run exited %d after SIGTERM, want 0:\n%s", code, testenv.Tail(r.Output(), 15))
	}
	if took := time.Since(start); took > shutdownTimeout+time.Second {
		t.Errorf("walbox run took %v to exit after SIGTERM with --shutdown-timeout %v and a frozen broker, want at most a second more:\n%s",
			took.Round(time.Millisecond), shutdownTimeout, testenv.Tail(r.Output(), 15))
	}
	thaw()
	w.startRelay()
	w.drain([]txn{before, during}, got, 2*time.Minute)
}

// SIGTERM while a large row is stuck in a socket write to a broker that answers nothing and has
// not blocked walbox (a stopped process, a partition): at the shutdown deadline walbox cuts the
// connection rather than wait for the write timeout, and exits within a second more. The row
// arrives after a restart.
func TestSIGTERMWhileALargeRowIsStuckInAFrozenBroker(t *testing.T) {
	rabbit := testenv.StartRabbit(t)
	testenv.RequireOwn(t, rabbit)
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)
	addr := testenv.FreeAddr(t)
	const shutdownTimeout = 2 * time.Second
	r := w.startRelay("WALBOX_LISTEN="+addr, "WALBOX_SHUTDOWN_TIMEOUT="+shutdownTimeout.String(), "GORACE=atexit_sleep_ms=0")
	waitHTTP(t, addr, "/readyz", "ready while streaming", func(code int, _ string) bool { return code == 200 })
	pid := rabbit.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := true
	thaw := func() {
		if frozen {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			frozen = false
		}
	}
	defer thaw()
	var id uuid.UUID
	err := w.conn.QueryRow(context.Background(), `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '1', 'order.created', jsonb_build_object('pad', repeat('x', 12 << 20))) RETURNING id`).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	// The relay reads the row within a second and publishes it: the write fills the socket
	// buffers and waits. Its write timeout (10 s) is far off.
	time.Sleep(3 * time.Second)

	start := time.Now()
	if code := r.Stop(30 * time.Second); code != 0 {
		t.Fatalf("walbox run exited %d after SIGTERM, want 0:\n%s", code, testenv.Tail(r.Output(), 15))
	}
	if took := time.Since(start); took > shutdownTimeout+time.Second {
		t.Errorf("walbox run took %v to exit after SIGTERM with --shutdown-timeout %v, want at most a second more:\n%s",
			took.Round(time.Millisecond), shutdownTimeout, testenv.Tail(r.Output(), 15))
	}
	thaw()
	w.startRelay()
	w.drain([]txn{{ids: []uuid.UUID{id}}}, nil, 2*time.Minute)
}

// The broker is killed mid-stream: the slot never passes a transaction the broker had not
// confirmed (those messages are on the broker's disk), and once it is back everything arrives.
func TestBrokerKilledMidStream(t *testing.T) {
	rabbit := testenv.StartRabbit(t)
	testenv.RequireOwn(t, rabbit)
	w := newWorld(t, testenv.SharedPostgres(t), rabbit)

	var (
		mu    sync.Mutex
		txns  []txn
		stop  = make(chan struct{})
		wrote = make(chan struct{})
	)
	writer := w.pg.Conn(t, w.db)
	go func() {
		defer close(wrote)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			x := w.insertTx(writer, 1+i%20, "order.created")
			mu.Lock()
			txns = append(txns, x)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	r := w.startRelay()
	waitForLSN(t, w, func(l pglogrepl.LSN) bool {
		mu.Lock()
		defer mu.Unlock()
		return len(txns) > 50 && l > txns[20].before
	})
	rabbit.Kill(t)
	time.Sleep(time.Second) // the relay notices and stops confirming
	frozen := w.slotLSN()
	time.Sleep(time.Second)
	if got := w.slotLSN(); got != frozen {
		t.Fatalf("slot moved from %s to %s while the broker was down", frozen, got)
	}
	r.Kill() // freeze the relay so the broker's contents can be checked against the slot
	close(stop)
	<-wrote

	rabbit.Start(t)
	var covered []txn
	for _, x := range txns {
		if x.before < frozen {
			covered = append(covered, x)
		}
	}
	onDisk := w.drainQuiet(2 * time.Second)
	checkCovered(t, covered, onDisk)

	w.startRelay()
	got := w.drain(txns, onDisk, 2*time.Minute)
	dups := checkAll(t, txns, append(onDisk, got...))
	t.Logf("broker killed after %d transactions; %d messages, %d duplicates", len(covered), len(allIDs(txns)), dups)
}

// checkCovered fails unless every message of the covered transactions is among got.
func checkCovered(t *testing.T, covered []txn, got []amqp.Delivery) {
	t.Helper()
	have := map[string]bool{}
	for _, d := range got {
		have[d.MessageId] = true
	}
	for _, x := range covered {
		for _, id := range x.ids {
			if !have[id.String()] {
				t.Fatalf("the slot passed message %s, but the broker does not have it", id)
			}
		}
	}
}

func TestStartupErrors(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	rabbit := testenv.SharedRabbit(t)
	const secret = "pw-Zq81-never-printed"

	t.Run("missing database url", func(t *testing.T) {
		w := &world{t: t, bin: walboxBin(t), rabbit: rabbit}
		out, code := w.walbox([]string{"WALBOX_DATABASE_URL="}, "run")
		if code != 2 || !strings.Contains(out, "WALBOX_DATABASE_URL") {
			t.Fatalf("exit %d, output %q: want exit 2 naming WALBOX_DATABASE_URL", code, out)
		}
	})
	t.Run("bad window", func(t *testing.T) {
		w := newWorld(t, pg, rabbit)
		out, code := w.walbox(nil, "run", "--window", "-3")
		if code != 2 || !strings.Contains(out, "--window") {
			t.Fatalf("exit %d, output %q: want exit 2 naming --window", code, out)
		}
	})
	t.Run("missing publication", func(t *testing.T) {
		w := newWorld(t, pg, rabbit)
		out, code := w.walbox([]string{"WALBOX_PUBLICATION=absent"}, "run")
		if code != 1 || !strings.Contains(out, "publication") {
			t.Fatalf("exit %d, output %q: want exit 1 about the publication", code, out)
		}
	})
	t.Run("unreachable broker", func(t *testing.T) {
		w := newWorld(t, pg, rabbit)
		out, code := w.walbox([]string{"WALBOX_AMQP_URL=amqp://walbox:" + secret + "@127.0.0.1:1/"}, "run")
		if code != 1 || !strings.Contains(out, "broker") {
			t.Fatalf("exit %d, output %q: want exit 1 about the broker", code, out)
		}
		if strings.Contains(out, secret) {
			t.Fatalf("the password appears in the output:\n%s", out)
		}
	})
	t.Run("wal_level replica", func(t *testing.T) {
		replica := testenv.StartPostgres(t, testenv.WithSetting("wal_level", "replica"))
		testenv.RequireOwn(t, replica)
		w := &world{t: t, bin: walboxBin(t), rabbit: rabbit, db: replica.NewDatabase(t), slot: "walbox"}
		out, code := w.walbox(nil, "run")
		if code != 1 || !strings.Contains(out, "wal_level") {
			t.Fatalf("exit %d, output %q: want exit 1 naming wal_level", code, out)
		}
	})
	t.Run("wrong database password", func(t *testing.T) {
		w := newWorld(t, pg, rabbit)
		u, err := url.Parse(w.db)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword("nobody", secret) // whatever role the server's URL names
		out, code := w.walbox([]string{"WALBOX_DATABASE_URL=" + u.String()}, "status")
		if code == 0 || strings.Contains(out, secret) {
			t.Fatalf("exit %d, output %q: want a failure without the password", code, out)
		}
	})
}

func TestStatus(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	out, code := w.walbox(nil, "status", "--json")
	if code != 0 {
		t.Fatalf("walbox status exited %d: %s", code, out)
	}
	var st struct {
		Slot              string  `json:"slot"`
		Exists            bool    `json:"exists"`
		Active            bool    `json:"active"`
		ConfirmedFlushLSN string  `json:"confirmed_flush_lsn"`
		LagBytes          *int64  `json:"lag_bytes"`
		WALStatus         *string `json:"wal_status"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if st.Slot != w.slot || !st.Exists || st.Active || st.LagBytes == nil || st.WALStatus == nil {
		t.Fatalf("status = %+v", st)
	}
	w.startRelay()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ = w.walbox(nil, "status")
		if strings.Contains(out, "active               true") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed the slot active:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, field := range []string{"active_pid", "confirmed_flush_lsn", "lag_bytes", "wal_status"} {
		if !strings.Contains(out, field) {
			t.Errorf("status lacks %s:\n%s", field, out)
		}
	}
}

// A row that can never be delivered is parked with its reason, an unroutable one goes to the
// alternate exchange's queue, and the stream carries on past both.
func TestParkedAndUnroutableRowsDoNotStallTheStream(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	ctx := context.Background()
	first := w.insertTx(w.conn, 1, "order.created")
	var emptyID, bigID string
	if err := w.conn.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '1', '', '{}') RETURNING id::text`).Scan(&emptyID); err != nil {
		t.Fatal(err)
	}
	if err := w.conn.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '2', 'order.huge', jsonb_build_object('x', repeat('y', 5000))) RETURNING id::text`).Scan(&bigID); err != nil {
		t.Fatal(err)
	}
	var unroutableID string
	if err := w.conn.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '3', 'no.binding', '{}') RETURNING id::text`).Scan(&unroutableID); err != nil {
		t.Fatal(err)
	}
	// The queue is bound to "#", so unbind it and bind only order.* to make no.binding unroutable.
	conn, ch := w.amqp()
	defer conn.Close()
	if err := ch.QueueUnbind(w.queue, "#", w.exchange, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(w.queue, "order.*", w.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	last := w.insertTx(w.conn, 1, "order.created")

	r := w.startRelay("WALBOX_MAX_MESSAGE_SIZE=4096")
	w.drain([]txn{first, last}, nil, time.Minute)
	waitForLSN(t, w, func(l pglogrepl.LSN) bool { return l > last.before })

	parked := w.queueMessages(w.exchange+".parked", 2)
	reasons := map[string]string{}
	for _, d := range parked {
		reasons[d.MessageId], _ = d.Headers["x-walbox-reason"].(string)
	}
	if !strings.Contains(reasons[emptyID], "event_type") {
		t.Errorf("parked reason for the empty event type = %q", reasons[emptyID])
	}
	if !strings.Contains(reasons[bigID], "4096") {
		t.Errorf("parked reason for the oversized row = %q", reasons[bigID])
	}
	un := w.queueMessages(w.exchange+".unroutable", 1)
	if un[0].MessageId != unroutableID {
		t.Errorf("alternate exchange got %s, want %s", un[0].MessageId, unroutableID)
	}
	if !strings.Contains(r.Output(), "parked") {
		t.Errorf("no log line about the parked rows:\n%s", r.Output())
	}
}

// queueMessages gets n messages from a queue, waiting for them.
func (w *world) queueMessages(queue string, n int) []amqp.Delivery {
	w.t.Helper()
	conn, ch := w.amqp()
	defer conn.Close()
	var got []amqp.Delivery
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < n {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			w.t.Fatalf("get from %s: %v", queue, err)
		}
		if ok {
			got = append(got, d)
			continue
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s holds %d messages, want %d", queue, len(got), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return got
}

// With the stream's settings, status names the stream's node when it does not answer, and judges
// the slot as without them. One node refuses the connection; another accepts it and never answers.
// Status says so within its bound, and exits 0 on a healthy slot.
func TestStatusWithAStreamNodeThatDoesNotAnswer(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := refused.Addr().String()
	refused.Close()
	for _, addr := range []string{closed, silent.Addr().String()} {
		out, code := w.walbox([]string{"WALBOX_STREAM_URL=rabbitmq-stream://guest:guest@" + addr + "/", "WALBOX_STREAM=events"}, "status")
		if code != 0 || !strings.Contains(out, "stream               not reachable") || !strings.Contains(out, addr) {
			t.Errorf("walbox status with the stream node at %s exited %d; want 0 and a line saying the node is not reachable:\n%s",
				addr, code, out)
		}
	}
}
