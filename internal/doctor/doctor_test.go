package doctor_test

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
	"github.com/walbox/walbox/internal/doctor"
	"github.com/walbox/walbox/internal/relayd"
	"github.com/walbox/walbox/internal/streamconn"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/registry"
	"github.com/walbox/walbox/replication"
	"github.com/walbox/walbox/slots"
)

// env is a migrated database with its slot, and a broker.
type env struct {
	pg     *testenv.Postgres
	db     string
	conn   *pgx.Conn
	cfg    doctor.Config
	broker string
}

func setup(t *testing.T) *env {
	t.Helper()
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL and RabbitMQ")
	}
	return setupOn(t, testenv.SharedPostgres(t))
}

// setupOn is setup on a server of the test's choice.
func setupOn(t *testing.T, pg *testenv.Postgres) *env {
	t.Helper()
	rabbit := testenv.SharedRabbit(t)
	e := &env{pg: pg, broker: rabbit.URL()}
	e.db, e.conn = pg.MigratedDatabase(t, migrations.Config{})
	ctx := t.Context()
	slot := testenv.UniqueName("slot")
	if _, err := slots.EnsureSlot(ctx, e.db, slot, "walbox", []outbox.Table{outbox.DefaultTable}, registry.New(e.conn, "public")); err != nil {
		t.Fatal(err)
	}
	e.cfg = doctor.Config{DatabaseURL: e.db, Slot: slot, Publication: "walbox", Prefix: outbox.DefaultMessagePrefix,
		Table: outbox.DefaultTable, Brokers: []publisher.Config{{URL: rabbit.URL(), Exchange: testenv.UniqueName("ex"), AppID: "walbox-doctor"}}}
	if err := e.cfg.Brokers[0].Validate(); err != nil {
		t.Fatal(err)
	}
	return e
}

// roleURL creates a role with attrs (dropped with the test) and returns the database's URL for it.
func (e *env) roleURL(t *testing.T, attrs string) string {
	t.Helper()
	testenv.RequireOwn(t, e.pg) // an external server may not admit the new role
	role := testenv.UniqueName("role")
	ident := pgx.Identifier{role}.Sanitize()
	e.pg.Exec(t, e.db, "CREATE ROLE "+ident+" "+attrs)
	t.Cleanup(func() {
		e.pg.Exec(t, e.db, "DROP OWNED BY "+ident)
		e.pg.Exec(t, e.db, "DROP ROLE "+ident)
	})
	u, err := url.Parse(e.db)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

// roleOf returns the user of a database URL.
func roleOf(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.User.Username()
}

func find(t *testing.T, checks []doctor.Check, name string) doctor.Check {
	t.Helper()
	for _, c := range checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s check in %+v", name, checks)
	return doctor.Check{}
}

// noFailures fails the test for every failed check.
func noFailures(t *testing.T, checks []doctor.Check) {
	t.Helper()
	for _, c := range checks {
		if c.Status == "fail" {
			t.Errorf("%s failed: %s (fix %q)", c.Name, c.Message, c.Fix)
		}
	}
}

// streams runs the relay as `walbox run` would with the doctor's settings, and reports whether a
// row written now is confirmed by the broker.
func (e *env) streams(t *testing.T, cfg doctor.Config) {
	t.Helper()
	eps, err := publisher.NewEndpoints(cfg.Brokers[0], []string{e.broker})
	if err != nil {
		t.Fatal(err)
	}
	d, err := relayd.New(relayd.Config{Brokers: eps, Relay: replication.Config{DatabaseURL: cfg.DatabaseURL, Slot: cfg.Slot,
		Publication: cfg.Publication, Table: cfg.Table, Mappings: cfg.Mappings, MaxBackoff: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	e.pg.Exec(t, e.db, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'order.created', '{}')`)
	for deadline := time.Now().Add(time.Minute); d.Stats().Confirmed.Load() == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the relay never confirmed the row (state %s, last error %q)",
				replication.State(d.Stats().State.Load()), d.Stats().LastError())
		}
	}
}

func TestGoodSetupPasses(t *testing.T) {
	e := setup(t)
	checks := doctor.Run(t.Context(), e.cfg)
	noFailures(t, checks)
	if got := doctor.Failed(checks); got != 0 {
		t.Errorf("Failed = %d, want 0", got)
	}
	for _, name := range []string{"postgres", "wal_level", "role", "replication_connection", "publication", "publication_table",
		"outbox_table", "emit_function", "slot", "slot_record", "record_rights", "broker", "exchange"} {
		if c := find(t, checks, name); c.Status != "pass" {
			t.Errorf("%s: %s %q (fix %q), want pass", name, c.Status, c.Message, c.Fix)
		}
	}
}

// The relay needs nothing but LOGIN REPLICATION (no SELECT on the outbox table): doctor passes
// such a role, and the relay streams with it.
func TestLeastPrivilegeRolePassesWhereRunStreams(t *testing.T) {
	e := setup(t)
	cfg := e.cfg
	cfg.DatabaseURL = e.roleURL(t, "LOGIN REPLICATION")
	role := roleOf(t, cfg.DatabaseURL)
	// Without the grant of `walbox migrate --relay-role`, the role may not move its record.
	c := find(t, doctor.Run(t.Context(), cfg), "record_rights")
	if c.Status != "fail" || !strings.Contains(c.Message, "role "+role+" may not execute walbox_slot_confirm") ||
		c.Fix != "as the outbox table's owner: walbox migrate --relay-role "+role {
		t.Errorf("record_rights before the grant: %s %q, fix %q: want a failure naming the role and the command", c.Status, c.Message, c.Fix)
	}
	if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "public", role); err != nil {
		t.Fatal(err)
	}
	checks := doctor.Run(t.Context(), cfg)
	noFailures(t, checks)
	if c := find(t, checks, "role"); c.Status != "pass" || !strings.Contains(c.Message, "has REPLICATION") {
		t.Errorf("role: %s %q, want a pass for REPLICATION", c.Status, c.Message)
	}
	if c := find(t, checks, "record_rights"); c.Status != "pass" {
		t.Errorf("record_rights: %s %q (fix %q), want pass", c.Status, c.Message, c.Fix)
	}
	e.streams(t, cfg)
}

// A legacy table mapped column by column passes beside the default one, and the relay streams
// both; a mapping naming a column the table lacks fails, naming it.
func TestMappedLegacyTablePassesWhereRunStreams(t *testing.T) {
	e := setup(t)
	e.pg.Exec(t, e.db, `CREATE TABLE legacy_events (event_id bigserial PRIMARY KEY, kind text NOT NULL, body jsonb NOT NULL,
		entity text, entity_id bigint, occurred_at timestamptz DEFAULT now())`)
	e.pg.Exec(t, e.db, `ALTER PUBLICATION walbox ADD TABLE legacy_events`)
	legacy := outbox.Mapping{Table: outbox.Table{Schema: "public", Name: "legacy_events"}, ID: "event_id", EventType: "kind",
		Payload: "body", AggregateType: "entity", AggregateID: "entity_id", CreatedAt: "occurred_at"}
	cfg := e.cfg
	cfg.Mappings = []outbox.Mapping{{Table: outbox.DefaultTable}, legacy}
	checks := doctor.Run(t.Context(), cfg)
	noFailures(t, checks)
	var tables int
	for _, c := range checks {
		if c.Name == "outbox_table" && c.Status == "pass" {
			tables++
		}
	}
	if tables != 2 || !strings.Contains(find(t, checks, "publication").Message, "public.legacy_events") {
		t.Errorf("%d outbox_table passes, want 2, and a publication check naming the legacy table: %+v", tables, checks)
	}
	e.streams(t, cfg)

	legacy.Payload = "data"
	cfg.Mappings[1] = legacy
	var named bool
	for _, c := range doctor.Run(t.Context(), cfg) {
		named = named || (c.Name == "outbox_table" && c.Status == "fail" && strings.Contains(c.Message, `"data"`))
	}
	if !named {
		t.Error("a mapping naming a missing column: no failed outbox_table check naming it")
	}
}

func TestFindsMisconfiguration(t *testing.T) {
	e := setup(t)
	for _, tc := range []struct {
		name, check, fix string
		edit             func(*doctor.Config)
	}{
		{"missing publication", "publication", "CREATE PUBLICATION nope FOR TABLE", func(c *doctor.Config) { c.Publication = "nope" }},
		{"missing table", "outbox_table", "walbox migrate", func(c *doctor.Config) { c.Table = outbox.Table{Schema: "public", Name: "nope"} }},
		{"emit function with another prefix", "emit_function", "--message-prefix", func(c *doctor.Config) { c.Prefix = "billing" }},
		{"slot recorded but missing", "slot_record", "walbox recover", func(c *doctor.Config) {
			e.pg.Exec(t, e.db, "SELECT pg_drop_replication_slot($1)", c.Slot)
		}},
		{"unreachable broker", "broker", "host and port", func(c *doctor.Config) {
			c.Brokers = []publisher.Config{c.Brokers[0]}
			c.Brokers[0].URL = "amqp://guest:guest@" + testenv.FreeAddr(t) + "/"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.cfg
			tc.edit(&cfg)
			checks := doctor.Run(t.Context(), cfg)
			c := find(t, checks, tc.check)
			if c.Status != "fail" || !strings.Contains(c.Fix, tc.fix) {
				t.Errorf("%s: %s %q, fix %q: want a failure with a fix about %q", tc.check, c.Status, c.Message, c.Fix, tc.fix)
			}
			if doctor.Failed(checks) == 0 {
				t.Error("Failed = 0")
			}
		})
	}
}

// A database migrated before the record functions were restricted lets PUBLIC execute them, and
// any role granted EXECUTE besides the owner and the relay's is a hole too: doctor fails on both,
// naming the command that puts it right, until that command ran.
func TestRecordRightsFailUntilMigrated(t *testing.T) {
	e := setup(t)
	other := roleOf(t, e.roleURL(t, "LOGIN"))
	for _, tc := range []struct{ name, grant, want string }{
		{"PUBLIC", "PUBLIC", "PUBLIC may execute walbox_slot_confirm"},
		{"another role", pgx.Identifier{other}.Sanitize(), "may execute walbox_slot_confirm (" + other + ")"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.pg.Exec(t, e.db, "GRANT EXECUTE ON FUNCTION walbox_slot_confirm(text, integer, pg_lsn, xid8) TO "+tc.grant)
			c := find(t, doctor.Run(t.Context(), e.cfg), "record_rights")
			if c.Status != "fail" || !strings.Contains(c.Message, tc.want) || !strings.Contains(c.Fix, "as the outbox table's owner: walbox migrate") {
				t.Errorf("record_rights: %s %q, fix %q: want a failure saying %q", c.Status, c.Message, c.Fix, tc.want)
			}
			if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "public", roleOf(t, e.db)); err != nil {
				t.Fatal(err)
			}
			if c := find(t, doctor.Run(t.Context(), e.cfg), "record_rights"); c.Status != "pass" {
				t.Errorf("record_rights after migrating again: %s %q (fix %q), want pass", c.Status, c.Message, c.Fix)
			}
		})
	}
}

// PostgreSQL lets PUBLIC execute pg_logical_emit_message, so any role can write a message walbox
// relays: doctor warns while messages are relayed, with the REVOKE that stops it, and passes
// once it ran, or with messages off.
func TestMessageRightsWarnUntilRevoked(t *testing.T) {
	e := setup(t)
	testenv.RequireOwn(t, e.pg) // changes a catalog function's rights in the test's database
	c := find(t, doctor.Run(t.Context(), e.cfg), "message_rights")
	if c.Status != "warn" || !strings.Contains(c.Message, "PUBLIC may execute pg_logical_emit_message") ||
		!strings.Contains(c.Fix, "REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text)") {
		t.Errorf("message_rights: %s %q, fix %q: want a warning with the REVOKE", c.Status, c.Message, c.Fix)
	}
	off := e.cfg
	off.Prefix = ""
	if c := find(t, doctor.Run(t.Context(), off), "message_rights"); c.Status != "pass" {
		t.Errorf("message_rights with messages off: %s %q, want pass", c.Status, c.Message)
	}
	fix := find(t, doctor.Run(t.Context(), e.cfg), "message_rights").Fix
	revoke, _, _ := strings.Cut(strings.TrimPrefix(fix, "as a superuser: "), ";")
	e.pg.Exec(t, e.db, revoke)
	if c := find(t, doctor.Run(t.Context(), e.cfg), "message_rights"); c.Status != "pass" {
		t.Errorf("message_rights after %s: %s %q, want pass", revoke, c.Status, c.Message)
	}
}

// doctor run as another role than the relay's (the owner, a superuser) accepts the relay role
// `walbox migrate --relay-role` recorded, with --relay-role or without: it used to fail that role,
// and suggest the superuser's own name for --relay-role.
func TestRecordRightsOfAnotherRelayRole(t *testing.T) {
	e := setup(t)
	relay := roleOf(t, e.roleURL(t, "LOGIN REPLICATION"))
	if _, err := migrations.ApplyRegistryFor(t.Context(), e.conn, "public", relay); err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.RelayRole = relay
	if c := find(t, doctor.Run(t.Context(), cfg), "record_rights"); c.Status != "pass" || !strings.Contains(c.Message, relay) {
		t.Errorf("record_rights with RelayRole %s: %s %q (fix %q), want a pass naming it", relay, c.Status, c.Message, c.Fix)
	}
	if c := find(t, doctor.Run(t.Context(), e.cfg), "record_rights"); c.Status != "pass" || !strings.Contains(c.Message, relay) {
		t.Errorf("record_rights without RelayRole: %s %q (fix %q), want a pass naming %s", c.Status, c.Message, c.Fix, relay)
	}
	cfg.RelayRole = relay + "_absent"
	if c := find(t, doctor.Run(t.Context(), cfg), "record_rights"); c.Status != "fail" || !strings.Contains(c.Fix, "--relay-role") {
		t.Errorf("record_rights with a RelayRole that does not exist: %s %q (fix %q), want a failure", c.Status, c.Message, c.Fix)
	}
}

// In stream mode (--stream-url) doctor checks the stream nodes instead of the exchange: a node
// that answers passes, a stream not declared yet warns, an unreachable node fails.
func TestStreamModeChecksTheStreamNode(t *testing.T) {
	e := setup(t)
	rabbit := testenv.StartRabbitStream(t)
	cfg := e.cfg
	cfg.Brokers = nil
	name := testenv.UniqueName("events")
	cfg.Stream = &doctor.StreamConfig{URIs: []string{rabbit.StreamURL()}, Stream: name}
	checks := doctor.Run(t.Context(), cfg)
	noFailures(t, checks)
	if c := find(t, checks, "stream_broker"); c.Status != "pass" {
		t.Errorf("stream_broker: %s %q, want pass", c.Status, c.Message)
	}
	if c := find(t, checks, "stream"); c.Status != "warn" {
		t.Errorf("stream before it is declared: %s %q, want warn", c.Status, c.Message)
	}

	env, err := stream.NewEnvironment(streamconn.Options().SetUri(rabbit.StreamURL()))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if err := env.DeclareStream(name, stream.NewStreamOptions()); err != nil {
		t.Fatal(err)
	}
	if c := find(t, doctor.Run(t.Context(), cfg), "stream"); c.Status != "pass" {
		t.Errorf("stream once declared: %s %q, want pass", c.Status, c.Message)
	}

	cfg.Stream.URIs = []string{"rabbitmq-stream://guest:secret@127.0.0.1:1/"}
	c := find(t, doctor.Run(t.Context(), cfg), "stream_broker")
	if c.Status != "fail" || strings.Contains(c.Message, "secret") {
		t.Errorf("unreachable stream node: %s %q, want fail, without the password", c.Status, c.Message)
	}
}

// The relay's role must write the schedule: doctor warns, with the migrate that grants it, until
// walbox migrate --relay-role names the role. A superuser passes.
func TestScheduleCheckNamesTheGrant(t *testing.T) {
	e := setup(t)
	if c := find(t, doctor.Run(t.Context(), e.cfg), "schedule"); c.Status != "pass" {
		t.Errorf("schedule as a superuser: %s %q, want pass", c.Status, c.Message)
	}
	relay := e.cfg
	relay.DatabaseURL = e.roleURL(t, "LOGIN REPLICATION")
	c := find(t, doctor.Run(t.Context(), relay), "schedule")
	if c.Status != "warn" || !strings.Contains(c.Fix, "walbox migrate --relay-role") {
		t.Fatalf("schedule as a role without grants: %s %q, fix %q; want a warning naming the migrate", c.Status, c.Message, c.Fix)
	}
	role := strings.TrimPrefix(c.Fix, "as the owner: walbox migrate --relay-role ")
	if _, err := migrations.Apply(t.Context(), e.conn, migrations.Config{RelayRole: role}); err != nil {
		t.Fatal(err)
	}
	if c := find(t, doctor.Run(t.Context(), relay), "schedule"); c.Status != "pass" {
		t.Errorf("schedule after migrate --relay-role %s: %s %q, want pass", role, c.Status, c.Message)
	}
}

// A schema before migration 018 (walbox_schedule_done.sent_by): the relay records rows due later
// but sends none. doctor warns, naming the column and walbox migrate.
func TestScheduleCheckNamesAMissingMigration018(t *testing.T) {
	e := setup(t)
	e.pg.Exec(t, e.db, "ALTER TABLE public.walbox_schedule_done DROP COLUMN sent_by")
	c := find(t, doctor.Run(t.Context(), e.cfg), "schedule")
	if c.Status != "warn" || c.Fix != "run walbox migrate" || !strings.Contains(c.Message, "sent_by (migration 018)") {
		t.Errorf("schedule without sent_by: %s %q, fix %q; want a warning naming migration 018 and walbox migrate", c.Status, c.Message, c.Fix)
	}
}

// A role that may CREATE in the outbox schema is given walbox_schedule_done: its trigger would run
// in walbox_cancel, as the function's owner, and in the relay. doctor fails, naming the table's owner.
func TestScheduleCheckFailsATableOfAnotherOwner(t *testing.T) {
	e := setup(t)
	squatter := roleOf(t, e.roleURL(t, "LOGIN"))
	e.pg.Exec(t, e.db, "ALTER TABLE public.walbox_schedule_done OWNER TO "+pgx.Identifier{squatter}.Sanitize())
	c := find(t, doctor.Run(t.Context(), e.cfg), "schedule")
	if c.Status != "fail" || !strings.Contains(c.Message, "public.walbox_schedule_done belongs to "+squatter) {
		t.Errorf("schedule with walbox_schedule_done owned by %s: %s %q, want a failure naming its owner", squatter, c.Status, c.Message)
	}
	e.pg.Exec(t, e.db, "ALTER TABLE public.walbox_schedule_done OWNER TO CURRENT_USER")
	if c := find(t, doctor.Run(t.Context(), e.cfg), "schedule"); c.Status != "pass" {
		t.Errorf("schedule once the owner has walbox_schedule_done back: %s %q, want pass", c.Status, c.Message)
	}
}
