package relayd_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walbox/walbox/canary"
	"github.com/walbox/walbox/internal/relayd"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/slots"
	"github.com/walbox/walbox/streampub"
	"github.com/walbox/walbox/wire"
)

// canaryInterval is short, so that the tests see two intervals pass; the waits allow for a loaded machine.
const canaryInterval = time.Second

// canaryDaemon starts a daemon with the canary on, and returns its configuration and the start of
// its canary queues' names.
func canaryDaemon(t *testing.T, interval time.Duration) (relayd.Config, *testenv.Postgres, string, string) {
	t.Helper()
	return canaryDaemonOn(t, interval, testenv.SharedRabbit(t))
}

// canaryDaemonOn is canaryDaemon on rabbit.
func canaryDaemonOn(t *testing.T, interval time.Duration, rabbit *testenv.Rabbit) (relayd.Config, *testenv.Postgres, string, string) {
	t.Helper()
	cfg, pg, db := config(t)
	cfg.Brokers = brokersOn(t, cfg, rabbit)
	cfg.Listen = testenv.FreeAddr(t)
	cfg.Canary = interval
	cfg.Relay.StatusInterval = 5 * time.Second // the relay's own publication check comes after the canary's
	prefix := canaryPrefix(t, cfg, pg, db)
	start(t, cfg)
	return cfg, pg, db, prefix
}

// canaryPrefix is how the names of the canary queues of cfg's relay of db start.
func canaryPrefix(t *testing.T, cfg relayd.Config, pg *testenv.Postgres, db string) string {
	t.Helper()
	var system, database string
	if err := pg.Conn(t, db).QueryRow(context.Background(), `SELECT system_identifier::text, current_database()::text
		FROM pg_control_system()`).Scan(&system, &database); err != nil {
		t.Fatal(err)
	}
	return canary.Queue(cfg.Brokers.Configs()[0].Exchange, system, database, cfg.Relay.Slot, "")
}

// brokersOn is cfg's broker configuration on rabbit, of cfg's exchange.
func brokersOn(t *testing.T, cfg relayd.Config, rabbit *testenv.Rabbit) *publisher.Endpoints {
	t.Helper()
	eps, err := publisher.NewEndpoints(publisher.Config{Exchange: cfg.Brokers.Configs()[0].Exchange, AppID: "walbox"},
		[]string{rabbit.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return eps
}

// eachRabbit runs test on the shared RabbitMQ 3.10 node and on a RabbitMQ 4.0 node of its own.
// With parallel, the two run at once.
func eachRabbit(t *testing.T, parallel bool, test func(t *testing.T, rabbit *testenv.Rabbit)) {
	t.Run("3.10", func(t *testing.T) {
		if parallel {
			t.Parallel()
		}
		test(t, testenv.SharedRabbit(t))
	})
	t.Run("4.0", func(t *testing.T) {
		if parallel {
			t.Parallel()
		}
		test(t, testenv.StartRabbit(t, testenv.RabbitVersion("4.0")))
	})
}

// canaryQueues lists the queues of rabbit whose names start with prefix.
func canaryQueues(t *testing.T, rabbit *testenv.Rabbit, prefix string) []string {
	t.Helper()
	var names []string
	for _, name := range strings.Fields(rabbit.Ctl(t, "list_queues", "--quiet", "--no-table-headers", "name")) {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	return names
}

// oneCanaryQueue waits until rabbit has exactly one queue whose name starts with prefix, other than
// not, and returns its name.
func oneCanaryQueue(t *testing.T, rabbit *testenv.Rabbit, prefix, not string) string {
	t.Helper()
	var names []string
	eventually(t, "one canary queue", func() bool {
		names = canaryQueues(t, rabbit, prefix)
		return len(names) == 1 && names[0] != not
	})
	return names[0]
}

// When its queue is lost, as with a cluster node, the canary declares a new one and reads on. Another
// connection may read the queue, but gets none of its canaries: they are the reader's. It may delete it.
func TestCanaryDeclaresANewQueueWhenItsOwnIsLost(t *testing.T) {
	rabbit := testenv.SharedRabbit(t)
	testenv.RequireOwn(t, rabbit) // lists its queues
	cfg, _, _, prefix := canaryDaemon(t, canaryInterval)
	eventually(t, "a canary back", func() bool { return metricValue(t, cfg.Listen, "walbox_canary_latency_seconds_count") >= 1 })
	queue := oneCanaryQueue(t, rabbit, prefix, "")
	other := testenv.Channel(t, rabbit.URL())
	taken, err := other.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume the canary queue %s from another connection: %v", queue, err)
	}
	back := metricValue(t, cfg.Listen, "walbox_canary_latency_seconds_count")
	eventually(t, "canaries back beside another consumer", func() bool {
		return metricValue(t, cfg.Listen, "walbox_canary_latency_seconds_count") >= back+2
	})
	select {
	case d := <-taken:
		t.Fatalf("another connection took a canary off %s: %s", queue, d.Body)
	default:
	}
	if _, err := testenv.Channel(t, rabbit.URL()).QueueDelete(queue, false, false, false); err != nil {
		t.Fatalf("delete the canary queue %s from another connection: %v", queue, err)
	}
	renewed := oneCanaryQueue(t, rabbit, prefix, queue)
	back = metricValue(t, cfg.Listen, "walbox_canary_latency_seconds_count")
	eventually(t, "canaries back from "+renewed, func() bool {
		return metricValue(t, cfg.Listen, "walbox_canary_latency_seconds_count") >= back+2
	})
	if code, body, _ := testenv.HTTPGet(cfg.Listen, "/readyz"); code != 200 {
		t.Errorf("/readyz: %d %q", code, body)
	}
}

// A process killed with SIGKILL says nothing to the broker. Its canary queue goes all the same, on
// RabbitMQ 3.10 and 4.0: its consumer went with the connection, and the unused queue expires.
func TestCanaryQueueGoesWithAKilledProcess(t *testing.T) {
	bin := testenv.Build(t, "cmd/walbox")
	eachRabbit(t, true, func(t *testing.T, rabbit *testenv.Rabbit) {
		testenv.RequireOwn(t, rabbit) // lists its queues
		cfg, pg, db := config(t)
		cfg.Brokers = brokersOn(t, cfg, rabbit)
		prefix, addr := canaryPrefix(t, cfg, pg, db), testenv.FreeAddr(t)
		cmd := exec.Command(bin, "run")
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "WALBOX_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, "WALBOX_DATABASE_URL="+db, "WALBOX_AMQP_URL="+rabbit.URL(), "WALBOX_SLOT="+cfg.Relay.Slot,
			"WALBOX_EXCHANGE="+cfg.Brokers.Configs()[0].Exchange, "WALBOX_LISTEN="+addr, "WALBOX_CANARY_INTERVAL=1s")
		cmd.Stdout, cmd.Stderr = testWriter{t}, testWriter{t}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		eventually(t, "a canary back", func() bool { return metricValue(t, addr, "walbox_canary_latency_seconds_count") >= 1 })
		queue := oneCanaryQueue(t, rabbit, prefix, "")
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		deadline := time.Now().Add(3 * time.Minute) // the queue expires a minute after its consumer went
		for len(canaryQueues(t, rabbit, prefix)) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the killed process's canary queue %s still there", queue)
			}
			time.Sleep(time.Second)
		}
	})
}

// metricValue reads one sample of /metrics; -1 when absent.
func metricValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	_, body, err := testenv.HTTPGet(addr, "/metrics")
	if err != nil {
		return -1
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// waitNotReady waits up to two intervals and a generous allowance for /readyz to answer 503 with want.
func waitNotReady(t *testing.T, addr string, interval time.Duration, want string) string {
	t.Helper()
	deadline := time.Now().Add(2*interval + 20*time.Second)
	for {
		code, body, _ := testenv.HTTPGet(addr, "/readyz")
		if code == 503 && strings.Contains(body, want) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %q; want 503 naming %q", code, body, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// On a RabbitMQ 4.0 cluster the canary's reader loses its node. It reads from another node, from a
// new queue. The old queue, bound still, takes the relay's canaries without a nack, and expires.
func TestCanaryOnACluster4LosesItsNodeAndReadsOn(t *testing.T) {
	cfg, _, _ := config(t)
	c := testenv.StartCluster(t, testenv.RabbitVersion("4.0"))
	eps, err := publisher.NewEndpoints(publisher.Config{Exchange: cfg.Brokers.Configs()[0].Exchange, AppID: "walbox"}, c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Brokers, cfg.Listen, cfg.Canary = eps, testenv.FreeAddr(t), canaryInterval
	start(t, cfg)
	eventually(t, "canaries back", func() bool { return metricValue(t, cfg.Listen, "walbox_canary_latency_seconds_count") >= 2 })
	c.Node(0).Kill(t) // the first URL's: the reader's and the relay's
	t.Cleanup(func() { c.StartAll(t) })
	back := metricValue(t, cfg.Listen, "walbox_canary_latency_seconds_count")
	eventually(t, "canaries back through another node", func() bool {
		return metricValue(t, cfg.Listen, "walbox_canary_latency_seconds_count") >= back+2
	})
	eventually(t, "ready", func() bool { code, _, _ := testenv.HTTPGet(cfg.Listen, "/readyz"); return code == 200 })
}

// The canary comes back, again and again: its age stays under two intervals, and /readyz is ready.
// Then another connection deletes its queue's binding, as an operator may. None comes back, and
// /readyz says so within two intervals, on RabbitMQ 3.10 and 4.0.
func TestCanaryComesBackAndFailsReadyWithoutItsBinding(t *testing.T) {
	eachRabbit(t, false, func(t *testing.T, rabbit *testenv.Rabbit) {
		testenv.RequireOwn(t, rabbit) // lists its queues
		cfg, _, _, prefix := canaryDaemonOn(t, canaryInterval, rabbit)
		eventually(t, "canaries back", func() bool { return metricValue(t, cfg.Listen, "walbox_canary_latency_seconds_count") >= 3 })
		for range 10 {
			if age := metricValue(t, cfg.Listen, "walbox_canary_age_seconds"); age < 0 || age > 2*canaryInterval.Seconds() {
				t.Fatalf("walbox_canary_age_seconds %v, want under two intervals", age)
			}
			if code, body, _ := testenv.HTTPGet(cfg.Listen, "/readyz"); code != 200 {
				t.Fatalf("/readyz: %d %q while canaries come back", code, body)
			}
			time.Sleep(canaryInterval / 4)
		}
		queue := oneCanaryQueue(t, rabbit, prefix, "")
		ch := testenv.Channel(t, rabbit.URL())
		if err := ch.QueueUnbind(queue, wire.CanaryEventType, cfg.Brokers.Configs()[0].Exchange, nil); err != nil {
			t.Fatalf("delete the binding of the canary queue %s from another connection: %v", queue, err)
		}
		body := waitNotReady(t, cfg.Listen, canaryInterval, "canary: none came back")
		t.Logf("/readyz: %s", body)
		if age := metricValue(t, cfg.Listen, "walbox_canary_age_seconds"); age < 2*canaryInterval.Seconds() {
			t.Errorf("walbox_canary_age_seconds %v after /readyz failed, want over two intervals", age)
		}
	})
}

// A logical decoding message is not filtered by the publication: it would still come back once
// the publication dropped the outbox table. The canary checks the publication before each write,
// and /readyz names it. The relay checks it too, before it reports the canary's position, and
// stops: whichever comes first, the instance is not ready within two intervals.
func TestCanaryFailsReadyWhenThePublicationDropsTheTable(t *testing.T) {
	cfg, pg, db := config(t)
	cfg.Listen = testenv.FreeAddr(t)
	cfg.Canary = canaryInterval
	_, _, done := start(t, cfg)
	eventually(t, "a canary back", func() bool { return metricValue(t, cfg.Listen, "walbox_canary_latency_seconds_count") >= 1 })
	pg.Exec(t, db, "ALTER PUBLICATION walbox DROP TABLE outbox")
	deadline := time.Now().Add(2*canaryInterval + 20*time.Second)
	for {
		code, body, err := testenv.HTTPGet(cfg.Listen, "/readyz")
		switch {
		case code == 503 && strings.Contains(body, "publication"):
			t.Logf("/readyz: %s", body)
			return
		case err != nil:
			// The relay stopped on it, and the endpoints with it.
			if err := waitResult(t, done); !errors.Is(err, replication.ErrNotCovered) {
				t.Fatalf("Run: %v; want the publication not covering the outbox", err)
			}
			return
		case time.Now().After(deadline):
			t.Fatalf("/readyz: %d %q two intervals after the publication dropped the table", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// With the canary off, walbox declares no canary queue and writes none.
func TestCanaryOffDeclaresNoQueue(t *testing.T) {
	rabbit := testenv.SharedRabbit(t)
	testenv.RequireOwn(t, rabbit) // lists its queues
	cfg, _, _, prefix := canaryDaemon(t, 0)
	eventually(t, "ready", func() bool { code, _, _ := testenv.HTTPGet(cfg.Listen, "/readyz"); return code == 200 })
	time.Sleep(2 * canaryInterval)
	if names := canaryQueues(t, rabbit, prefix); len(names) != 0 {
		t.Errorf("canary queues %v with the canary off; want none", names)
	}
	if v := metricValue(t, cfg.Listen, "walbox_canary_age_seconds"); v != -1 {
		t.Errorf("walbox_canary_age_seconds %v with the canary off; want none", v)
	}
}

// Only the instance that streams writes and reads canaries. A standby of the same slot shows age 0,
// reads none, and answers /readyz "standby".
func TestCanaryOnlyTheActiveInstanceSendsIt(t *testing.T) {
	cfg, _, _, _ := canaryDaemon(t, canaryInterval)
	eventually(t, "a canary back", func() bool { return metricValue(t, cfg.Listen, "walbox_canary_latency_seconds_count") >= 1 })
	standby := cfg
	standby.Listen = testenv.FreeAddr(t)
	start(t, standby)
	eventually(t, "the second instance a standby", func() bool {
		code, body, _ := testenv.HTTPGet(standby.Listen, "/readyz")
		return code == 200 && strings.Contains(body, "standby")
	})
	time.Sleep(2 * canaryInterval)
	if n := metricValue(t, standby.Listen, "walbox_canary_latency_seconds_count"); n != 0 {
		t.Errorf("the standby read %v canaries, want 0", n)
	}
	if age := metricValue(t, standby.Listen, "walbox_canary_age_seconds"); age != 0 {
		t.Errorf("the standby's walbox_canary_age_seconds %v, want 0", age)
	}
	if code, body, _ := testenv.HTTPGet(cfg.Listen, "/readyz"); code != 200 {
		t.Errorf("the active instance's /readyz: %d %q", code, body)
	}
}

// Two databases relay to one exchange of one broker. Each reads back only its own canaries, from
// its own queue, though both queues get both relays' canaries.
func TestCanaryOfTwoDatabasesOnOneBroker(t *testing.T) {
	first, _, _, _ := canaryDaemon(t, canaryInterval)
	second, _, _ := config(t)
	second.Brokers, second.Listen, second.Canary = first.Brokers, testenv.FreeAddr(t), canaryInterval
	start(t, second)
	for _, addr := range []string{first.Listen, second.Listen} {
		eventually(t, "canaries back on "+addr, func() bool { return metricValue(t, addr, "walbox_canary_latency_seconds_count") >= 3 })
	}
	const sent = `walbox_messages_confirmed_total{event_type="walbox.canary"}`
	for _, addr := range []string{first.Listen, second.Listen} {
		back, own := metricValue(t, addr, "walbox_canary_latency_seconds_count"), metricValue(t, addr, sent)
		if back > own+1 { // one may come back before its confirm is counted
			t.Errorf("%s read %v canaries back, but relayed %v of its own: it counted the other database's", addr, back, own)
		}
		if code, body, _ := testenv.HTTPGet(addr, "/readyz"); code != 200 {
			t.Errorf("%s /readyz: %d %q", addr, code, body)
		}
	}
}

// Two databases cloned from one base backup share the system identifier and the database's name.
// Their relays, of one slot name on one exchange, name their canary queues alike. A reader of an
// older process may still read that name. Yet every canary of each relay comes back to it, and
// each stays ready: none judges, or takes, another's canaries.
func TestCanaryOfClonedDatabasesWithOneSlotName(t *testing.T) {
	first, _, _ := config(t)
	primary := testenv.StartPostgres(t)
	testenv.RequireOwn(t, primary) // makes a clone of it
	db, _ := primary.MigratedDatabase(t, migrations.Config{})
	clone := testenv.StartStandby(t, primary, "clone")
	clone.Promote(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = fmt.Sprintf("%s:%d", u.Hostname(), clone.Port())
	second := first
	first.Relay.DatabaseURL, first.Listen, first.Canary = db, testenv.FreeAddr(t), canaryInterval
	// Another interval: the two relays' canaries interleave in every order.
	second.Relay.DatabaseURL, second.Listen, second.Canary = u.String(), testenv.FreeAddr(t), canaryInterval*13/10
	prefix := canaryPrefix(t, first, primary, db)
	if other := canaryPrefix(t, second, clone, u.String()); other != prefix {
		t.Fatalf("the clone's canary queues start %q, the original's %q: not a clone", other, prefix)
	}
	start(t, first)
	eventually(t, "a canary back on "+first.Listen, func() bool {
		return metricValue(t, first.Listen, "walbox_canary_latency_seconds_count") >= 1
	})
	// An older process reads the name shared before each reader had a queue of its own.
	rabbit := testenv.SharedRabbit(t)
	ch, old := testenv.Channel(t, rabbit.URL()), strings.TrimSuffix(prefix, ".")
	if _, err := ch.QueueDeclare(old, true, false, false, false, amqp.Table{"x-max-length": int64(100)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = testenv.Channel(t, rabbit.URL()).QueueDelete(old, false, false, false) })
	if err := ch.QueueBind(old, wire.CanaryEventType, first.Brokers.Configs()[0].Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume(old, "", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	start(t, second)
	relays := []relayd.Config{first, second}
	for _, r := range relays {
		eventually(t, "canaries back on "+r.Listen, func() bool {
			code, _, _ := testenv.HTTPGet(r.Listen, "/readyz")
			return code == 200 && metricValue(t, r.Listen, "walbox_canary_latency_seconds_count") >= 2
		})
	}
	for end := time.Now().Add(10 * canaryInterval); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		for _, r := range relays {
			if code, body, _ := testenv.HTTPGet(r.Listen, "/readyz"); code != 200 {
				t.Fatalf("%s /readyz: %d %q while its canaries are relayed", r.Listen, code, body)
			}
		}
	}
	const sent = `walbox_messages_confirmed_total{event_type="walbox.canary"}`
	for _, r := range relays {
		own := metricValue(t, r.Listen, sent)
		eventually(t, fmt.Sprintf("all %v canaries of %s back", own, r.Listen), func() bool {
			return metricValue(t, r.Listen, "walbox_canary_latency_seconds_count") >= own
		})
		if back := metricValue(t, r.Listen, "walbox_canary_latency_seconds_count"); back > metricValue(t, r.Listen, sent)+1 {
			t.Errorf("%s read %v canaries back, but relayed %v: it counted another's", r.Listen, back, own)
		}
	}
}

// A broker user with rights on the exchange's own names only reads the canary back: its queue's
// name starts with the exchange's. The canary's queue is quorum, not exclusive, and expires. The
// same on RabbitMQ 3.10 and 4.0.
func TestCanaryForALeastPrivilegedBrokerUserWithQuorumQueues(t *testing.T) {
	eachRabbit(t, false, leastPrivilegedCanary)
}

// leastPrivilegedCanary is TestCanaryForALeastPrivilegedBrokerUserWithQuorumQueues on rabbit.
func leastPrivilegedCanary(t *testing.T, rabbit *testenv.Rabbit) {
	cfg, pg, db := config(t)
	testenv.RequireOwn(t, rabbit) // adds a user to it
	exchange := cfg.Brokers.Configs()[0].Exchange
	own := "^" + regexp.QuoteMeta(exchange) + `(\..*)?$`
	user := testenv.UniqueName("canary")
	rabbit.Ctl(t, "add_user", user, "secret")
	rabbit.Ctl(t, "set_permissions", "-p", "/", user, own, own, own)
	t.Cleanup(func() { rabbit.Ctl(t, "delete_user", user) })
	eps, err := publisher.NewEndpoints(publisher.Config{Exchange: exchange, AppID: "walbox", QueueType: publisher.QueueQuorum},
		[]string{strings.Replace(rabbit.URL(), "guest:guest@", user+":secret@", 1)})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Brokers, cfg.Listen, cfg.Canary = eps, testenv.FreeAddr(t), canaryInterval
	prefix := canaryPrefix(t, cfg, pg, db)
	t.Cleanup(func() {
		ch := testenv.Channel(t, rabbit.URL())
		for _, q := range []string{exchange + ".parked", exchange + ".unroutable"} {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
	})
	start(t, cfg)
	eventually(t, "canaries back", func() bool { return metricValue(t, cfg.Listen, "walbox_canary_latency_seconds_count") >= 2 })
	if code, body, _ := testenv.HTTPGet(cfg.Listen, "/readyz"); code != 200 {
		t.Errorf("/readyz: %d %q", code, body)
	}
	queue := oneCanaryQueue(t, rabbit, prefix, "")
	want := "quorum true false" // type, durable, auto-delete; exclusive is blank or false
	for _, line := range strings.Split(rabbit.Ctl(t, "list_queues", "--quiet", "--no-table-headers",
		"name", "type", "durable", "auto_delete", "exclusive", "arguments"), "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 5 || f[0] != queue {
			continue
		}
		if got := strings.Join(f[1:4], " "); got != want || f[4] == "true" || !strings.Contains(line, "x-expires") {
			t.Errorf("canary queue %s: %s; want %q, not exclusive, and x-expires", queue, line, want)
		}
	}
}

// Into a stream, the canary goes into the stream and is read back from it, from its end.
func TestCanaryInStreamModeIsReadFromTheStream(t *testing.T) {
	cfg, _, _ := config(t)
	rabbit := testenv.StartRabbitStream(t)
	cfg.Stream = &streampub.Config{URIs: []string{rabbit.StreamURL()}, Stream: testenv.UniqueName("events")}
	cfg.Brokers, cfg.Listen, cfg.Canary = nil, testenv.FreeAddr(t), canaryInterval
	start(t, cfg)
	eventually(t, "canaries back from the stream", func() bool {
		return metricValue(t, cfg.Listen, "walbox_canary_latency_seconds_count") >= 2
	})
	if code, body, _ := testenv.HTTPGet(cfg.Listen, "/readyz"); code != 200 {
		t.Errorf("/readyz: %d %q", code, body)
	}
	if age := metricValue(t, cfg.Listen, "walbox_canary_age_seconds"); age < 0 || age > 2*canaryInterval.Seconds() {
		t.Errorf("walbox_canary_age_seconds %v, want under two intervals", age)
	}
}

// With --replication-url the relay decodes from a standby's slot, which is read-only. The canary is
// written on the primary (--database-url), replayed on the standby, decoded there, and comes back.
func TestCanaryWithTheSlotOnAStandby(t *testing.T) {
	cfg, _, _ := config(t)
	primary := testenv.StartPostgres(t, testenv.PGVersion(17))
	testenv.RequireOwn(t, primary)
	standby := testenv.StartStandby(t, primary, "physical", testenv.WithSetting("hot_standby_feedback", "on"))
	db, conn := primary.MigratedDatabase(t, migrations.Config{})
	replURL := testenv.OnStandby(t, db, standby)
	done := make(chan error, 1)
	go func() {
		_, err := slots.EnsureSlot(context.Background(), db, cfg.Relay.Slot, "walbox", []wire.Table{wire.DefaultTable},
			registry.New(conn, "public"), slots.WithReplicationURL(replURL))
		done <- err
	}()
	side := primary.Conn(t, db)
	created := false
	for !created { // creation on a standby waits for a running-transactions record from the primary
		if _, err := side.Exec(t.Context(), "SELECT pg_log_standby_snapshot()"); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			created = true
		case <-time.After(time.Second):
		}
	}
	cfg.Relay.DatabaseURL, cfg.Relay.ReplicationURL = db, replURL
	cfg.Listen, cfg.Canary = testenv.FreeAddr(t), canaryInterval
	start(t, cfg)
	eventually(t, "canaries back through the standby", func() bool {
		return metricValue(t, cfg.Listen, "walbox_canary_latency_seconds_count") >= 2
	})
	if code, body, _ := testenv.HTTPGet(cfg.Listen, "/readyz"); code != 200 {
		t.Errorf("/readyz: %d %q", code, body)
	}
}

// PostgreSQL 13 sends no logical decoding messages: pgoutput's messages option is new in 14. So
// no canary could come back there. The canary stays off, and the instance is ready.
func TestCanaryOnPostgreSQL13IsOffAndReady(t *testing.T) {
	cfg, _, _ := config(t)
	pg := testenv.StartPostgres(t, testenv.PGVersion(13))
	cfg.Relay.DatabaseURL, _ = pg.MigratedDatabase(t, migrations.Config{})
	cfg.Listen, cfg.Canary = testenv.FreeAddr(t), canaryInterval
	cfg.Relay.MessagePrefix = replication.NoMessages // as PostgreSQL 13 needs
	_, _, done := start(t, cfg)
	eventually(t, "streaming", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run on PostgreSQL 13: %v", err)
		default:
		}
		_, body, _ := testenv.HTTPGet(cfg.Listen, "/status")
		return strings.Contains(body, `"state": "streaming"`)
	})
	time.Sleep(3 * canaryInterval)
	for range 10 {
		if code, body, _ := testenv.HTTPGet(cfg.Listen, "/readyz"); code != 200 {
			t.Fatalf("/readyz on PostgreSQL 13: %d %q; want ready", code, body)
		}
		if age := metricValue(t, cfg.Listen, "walbox_canary_age_seconds"); age != 0 {
			t.Fatalf("walbox_canary_age_seconds %v on PostgreSQL 13; want 0, as the alert must not fire", age)
		}
		time.Sleep(canaryInterval / 2)
	}
}
