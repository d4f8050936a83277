package faults_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/walbox/walbox/consumer"
	"github.com/walbox/walbox/consumer/streamconsumer"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/outbox"
)

// Issue 33: no code of another role runs as walbox. On PostgreSQL 15 the role that owns the
// database may CREATE in public. An exact-match overload of a built-in that walbox calls
// unqualified then runs with the rights of whoever calls: the relay's role under walbox run, a
// superuser under walbox doctor or migrate.

// plantedSchemas are the schemas the application role plants its overloads in: public (the outbox
// table's and the registry's) and legacy (a mapped table's).
var plantedSchemas = []string{"public", "legacy"}

// polymorphicOverloads are exact matches for the calls whose built-in takes a polymorphic or
// "any" argument, or needs an implicit cast: these win over pg_catalog even where pg_catalog
// comes first on the path. %[1]s is the schema. Each records the call, then calls pg_catalog's.
var polymorphicOverloads = []string{
	`CREATE FUNCTION %[1]s.to_jsonb(public.walbox_slots) RETURNS jsonb LANGUAGE sql AS $$
		INSERT INTO public.captured (fn, who) VALUES ('%[1]s.to_jsonb(walbox_slots)', current_user);
		SELECT pg_catalog.to_jsonb($1) $$`,
	`CREATE FUNCTION %[1]s.to_jsonb(pg_catalog.pg_replication_slots) RETURNS jsonb LANGUAGE sql AS $$
		INSERT INTO public.captured (fn, who) VALUES ('%[1]s.to_jsonb(pg_replication_slots)', current_user);
		SELECT pg_catalog.to_jsonb($1) $$`,
	`CREATE FUNCTION %[1]s.format(text, text) RETURNS text LANGUAGE sql AS $$
		INSERT INTO public.captured (fn, who) VALUES ('%[1]s.format(text, text)', current_user);
		SELECT pg_catalog.format($1, $2) $$`,
	`CREATE FUNCTION %[1]s.quote_ident(name) RETURNS text LANGUAGE sql AS $$
		INSERT INTO public.captured (fn, who) VALUES ('%[1]s.quote_ident(name)', current_user);
		SELECT pg_catalog.quote_ident($1::text) $$`,
	`CREATE FUNCTION %[1]s.pg_advisory_xact_lock(integer) RETURNS void LANGUAGE sql AS $$
		INSERT INTO public.captured (fn, who) VALUES ('%[1]s.pg_advisory_xact_lock(integer)', current_user);
		SELECT pg_catalog.pg_advisory_xact_lock($1) $$`,
	`CREATE FUNCTION %[1]s.unnest(uuid[]) RETURNS SETOF uuid LANGUAGE sql AS $$
		INSERT INTO public.captured (fn, who) VALUES ('%[1]s.unnest(uuid[])', current_user);
		SELECT * FROM pg_catalog.unnest($1) $$`,
	`CREATE FUNCTION %[1]s.unnest(text[]) RETURNS SETOF text LANGUAGE sql AS $$
		INSERT INTO public.captured (fn, who) VALUES ('%[1]s.unnest(text[])', current_user);
		SELECT * FROM pg_catalog.unnest($1) $$`,
	`CREATE FUNCTION %[1]s.unnest(jsonb[]) RETURNS SETOF jsonb LANGUAGE sql AS $$
		INSERT INTO public.captured (fn, who) VALUES ('%[1]s.unnest(jsonb[])', current_user);
		SELECT * FROM pg_catalog.unnest($1) $$`,
	`CREATE FUNCTION %[1]s.unnest(timestamptz[]) RETURNS SETOF timestamptz LANGUAGE sql AS $$
		INSERT INTO public.captured (fn, who) VALUES ('%[1]s.unnest(timestamptz[])', current_user);
		SELECT * FROM pg_catalog.unnest($1) $$`,
	// Aggregates: a step function that records each row.
	`CREATE FUNCTION %[1]s.captured_count(bigint) RETURNS bigint LANGUAGE sql AS $$
		INSERT INTO public.captured (fn, who) VALUES ('%[1]s.count(*)', current_user);
		SELECT $1 + 1 $$;
	CREATE AGGREGATE %[1]s.count(*) (SFUNC = %[1]s.captured_count, STYPE = bigint, INITCOND = '0')`,
	`CREATE FUNCTION %[1]s.captured_array_agg(text[], text) RETURNS text[] LANGUAGE sql AS $$
		INSERT INTO public.captured (fn, who) VALUES ('%[1]s.array_agg(text)', current_user);
		SELECT pg_catalog.array_append($1, $2) $$;
	CREATE AGGREGATE %[1]s.array_agg(text) (SFUNC = %[1]s.captured_array_agg, STYPE = text[])`,
	`CREATE FUNCTION %[1]s.captured_string_agg(text, name, text) RETURNS text LANGUAGE sql AS $$
		INSERT INTO public.captured (fn, who) VALUES ('%[1]s.string_agg(name, text)', current_user);
		SELECT CASE WHEN $1 IS NULL THEN $2::text ELSE pg_catalog.concat($1, $3, $2) END $$;
	CREATE AGGREGATE %[1]s.string_agg(name, text) (SFUNC = %[1]s.captured_string_agg, STYPE = text)`,
	`CREATE FUNCTION %[1]s.captured_string_agg(text, text, text) RETURNS text LANGUAGE sql AS $$
		INSERT INTO public.captured (fn, who) VALUES ('%[1]s.string_agg(text, text)', current_user);
		SELECT CASE WHEN $1 IS NULL THEN $2 ELSE pg_catalog.concat($1, $3, $2) END $$;
	CREATE AGGREGATE %[1]s.string_agg(text, text) (SFUNC = %[1]s.captured_string_agg, STYPE = text)`,
	`CREATE FUNCTION %[1]s.captured_bool_or(boolean, boolean) RETURNS boolean LANGUAGE sql AS $$
		INSERT INTO public.captured (fn, who) VALUES ('%[1]s.bool_or(boolean)', current_user);
		SELECT coalesce($1, false) OR $2 $$;
	CREATE AGGREGATE %[1]s.bool_or(boolean) (SFUNC = %[1]s.captured_bool_or, STYPE = boolean)`,
}

// exactOverloads plants, in every schema, a function with the signature of each pg_catalog
// function of those names: a plain function (no aggregate or window function), without OUT
// parameters or pseudo-types. Such a copy wins wherever the path puts its schema before
// pg_catalog, as ALTER ROLE ... SET search_path or options=-c search_path=... may.
const exactOverloads = `DO $gen$
DECLARE
	f record;
	s text;
	call text;
BEGIN
	FOR f IN SELECT p.proname::text AS name, p.proretset AS retset, p.pronargs AS nargs, p.provariadic <> 0 AS variadic,
			pg_catalog.oidvectortypes(p.proargtypes) AS args, pg_catalog.format_type(p.prorettype, NULL) AS ret
		FROM pg_catalog.pg_proc p
		WHERE p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace AND p.proname = ANY (%[1]s::pg_catalog.name[])
		  AND p.prokind = 'f' AND p.proallargtypes IS NULL
		  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_type t
			WHERE t.typtype = 'p' AND ((t.oid = p.prorettype AND t.typname <> 'void') OR t.oid = ANY (p.proargtypes::pg_catalog.oid[])))
	LOOP
		SELECT pg_catalog.string_agg(CASE WHEN f.variadic AND i = f.nargs THEN 'VARIADIC ' ELSE '' END || '$' || i, ', ' ORDER BY i)
			INTO call FROM pg_catalog.generate_series(1, f.nargs) i;
		FOREACH s IN ARRAY %[2]s::pg_catalog.text[] LOOP
			EXECUTE pg_catalog.format('CREATE FUNCTION %%I.%%I(%%s) RETURNS %%s%%s LANGUAGE sql AS %%L', s, f.name, f.args,
				CASE WHEN f.retset THEN 'SETOF ' ELSE '' END, f.ret,
				pg_catalog.format('INSERT INTO public.captured (fn, who) VALUES (%%L, current_user); SELECT %%s pg_catalog.%%I(%%s)',
					s || '.' || f.name || '(' || f.args || ')', CASE WHEN f.retset THEN '* FROM' ELSE '' END, f.name,
					coalesce(call, '')));
		END LOOP;
	END LOOP;
END
$gen$`

// builtinNames are the pg_catalog functions named in walbox's SQL: every identifier followed by
// "(" in a string literal of the product's Go code or in its migrations, that names a function of
// pg_catalog (pg_proc on the server decides). English words in messages that happen to name one
// ("left(", "position(") are planted too, which does no harm.
func builtinNames(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	var all []string
	if err := conn.QueryRow(context.Background(), `SELECT pg_catalog.array_agg(DISTINCT proname::pg_catalog.text)
		FROM pg_catalog.pg_proc WHERE pronamespace = 'pg_catalog'::pg_catalog.regnamespace`).Scan(&all); err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range calledNames(t) {
		if slices.Contains(all, name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

var callRE = regexp.MustCompile(`(?i)\b([a-z_][a-z0-9_]*)\s*\(`)

// calledNames returns every identifier followed by "(" in the string literals of the product's
// Go files (tests, the harness and the examples aside) and in its migrations.
func calledNames(t *testing.T) map[string]bool {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	add := func(s string) {
		for _, m := range callRE.FindAllStringSubmatch(s, -1) {
			names[strings.ToLower(m[1])] = true
		}
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || slices.Contains([]string{"test", "examples", "deploy", "docs", "testdata", "internal/testenv"}, rel) {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(path, ".sql"):
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			add(string(data))
		case strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go"):
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						add(s)
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// The scan finds the calls the hand-written overloads stand for, so that it is known to read the
// product's SQL.
func TestBuiltinScanFindsWalboxCalls(t *testing.T) {
	names := calledNames(t)
	for _, want := range []string{"to_jsonb", "format", "quote_ident", "unnest", "count", "array_agg", "string_agg", "bool_or",
		"now", "pg_current_wal_lsn", "pg_advisory_xact_lock", "hashtext", "gen_random_uuid"} {
		if !names[want] {
			t.Errorf("the scan of walbox's SQL found no call of %s", want)
		}
	}
}

// The application role owns the database, so it may CREATE in public, and it owns the schema of a
// mapped table. It plants in both an overload of every built-in walbox's SQL calls, each recording
// current_user. walbox run, doctor, status, migrate, recover, prune and reshard, as the relay's
// role and as a superuser, and the producer and consumer libraries, run none of them: walbox pins
// search_path on its connections (even against the relay role's own setting and an options
// parameter), and the libraries qualify every name.
func TestPlantedOverloadsNeverRun(t *testing.T) {
	heavy(t)
	pg := testenv.StartPostgres(t)
	testenv.RequireOwn(t, pg)
	rabbit := testenv.SharedRabbit(t)
	ctx := context.Background()
	dbName := testenv.UniqueName("app")
	pg.Exec(t, pg.URL(), "CREATE ROLE app LOGIN")
	pg.Exec(t, pg.URL(), "CREATE ROLE walbox_relay LOGIN REPLICATION")
	pg.Exec(t, pg.URL(), "CREATE DATABASE "+dbName+" OWNER app")
	// The relay role's own setting and the superuser's options put the planted schemas first: only
	// the pinned search_path keeps exact copies of built-ins from winning.
	pg.Exec(t, pg.URL(), "ALTER ROLE walbox_relay SET search_path = public, legacy, pg_catalog")
	asRole := func(role, query string) string {
		u, err := url.Parse(pg.URL())
		if err != nil {
			t.Fatal(err)
		}
		u.User, u.Path, u.RawQuery = url.User(role), "/"+dbName, query
		return u.String()
	}
	super, app, relayURL := asRole("postgres", ""), asRole("app", ""), asRole("walbox_relay", "")
	superPinnedLater := asRole("postgres", "options="+strings.ReplaceAll(url.QueryEscape("-c search_path=public,legacy,pg_catalog"), "+", "%20"))

	pg.Exec(t, app, `CREATE SCHEMA legacy;
		CREATE TABLE legacy.events (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregate_type text NOT NULL,
			aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb NOT NULL, headers jsonb NOT NULL DEFAULT '{}',
			created_at timestamptz NOT NULL DEFAULT now());
		GRANT USAGE ON SCHEMA legacy TO walbox_relay`)
	config := filepath.Join(t.TempDir(), "walbox.yaml")
	if err := os.WriteFile(config, []byte("tables:\n  - table: public.outbox\n  - table: legacy.events\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, pg: pg, rabbit: rabbit, db: super, relayDB: relayURL, relayMQ: rabbit.URL(),
		slot: testenv.UniqueName("slot"), exchange: testenv.UniqueName("ex"), queue: testenv.UniqueName("q"), binding: "#"}
	w.conn = pg.Conn(t, super)
	asSuper := []string{"WALBOX_DATABASE_URL=" + superPinnedLater, "WALBOX_CONFIG=" + config}
	asRelay := []string{"WALBOX_CONFIG=" + config}
	if out, code := w.walbox(asSuper, "migrate", "--no-slot", "--relay-role", "walbox_relay"); code != 0 {
		t.Fatalf("walbox migrate --no-slot as the superuser exited %d:\n%s", code, out)
	}
	pg.Exec(t, super, "ALTER PUBLICATION walbox ADD TABLE legacy.events")
	w.declare()

	// The plant, as the application role.
	pg.Exec(t, super, `CREATE TABLE public.captured (fn text NOT NULL, who text NOT NULL);
		ALTER TABLE public.captured OWNER TO app; GRANT INSERT ON public.captured TO PUBLIC`)
	names := builtinNames(t, w.conn)
	t.Logf("built-ins named in walbox's SQL: %s", strings.Join(names, " "))
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = `"` + n + `"`
	}
	planter := pg.Conn(t, app)
	arrayOf := func(items []string) string { return "'{" + strings.Join(items, ",") + "}'" }
	if _, err := planter.Exec(ctx, fmt.Sprintf(exactOverloads, arrayOf(quoted), arrayOf(plantedSchemas))); err != nil {
		t.Fatalf("plant the exact overloads: %v", err)
	}
	for _, s := range plantedSchemas {
		for _, q := range polymorphicOverloads {
			if _, err := planter.Exec(ctx, fmt.Sprintf(q, s)); err != nil {
				t.Fatalf("plant %s: %v", fmt.Sprintf(q, s), err)
			}
		}
	}
	var planted int
	if err := w.conn.QueryRow(ctx, `SELECT pg_catalog.count(*) FROM pg_catalog.pg_proc p
		JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = ANY ($1::pg_catalog.text[])
		AND pg_catalog.pg_get_userbyid(p.proowner) = 'app'`, plantedSchemas).Scan(&planted); err != nil {
		t.Fatal(err)
	}
	t.Logf("planted %d functions and aggregates in %s", planted, strings.Join(plantedSchemas, ", "))
	// The plant works: the application role's own unqualified call runs it.
	if _, err := planter.Exec(ctx, "SELECT to_jsonb(NULL::public.walbox_slots)"); err != nil {
		t.Fatal(err)
	}
	if n := capturedCount(t, w.conn); n == 0 {
		t.Fatal("the application role's own call of to_jsonb(walbox_slots) did not run the planted overload")
	}
	pg.Exec(t, super, "TRUNCATE public.captured")

	var seen int
	check := func(step string) {
		t.Helper()
		rows := captured(t, w.conn)
		if len(rows) > seen {
			t.Errorf("%s ran planted overloads:\n  %s", step, strings.Join(rows[seen:], "\n  "))
			seen = len(rows)
		}
	}
	for _, as := range []struct {
		name string
		env  []string
	}{{"the superuser", asSuper}, {"walbox_relay", asRelay}} {
		out, code := w.walbox(as.env, "migrate", "--relay-role", "walbox_relay")
		t.Logf("walbox migrate as %s exited %d:\n%s", as.name, code, testenv.Tail(out, 5))
		check("walbox migrate as " + as.name)
	}

	// The consumer library handles what the relay publishes, on the caller's pool.
	if err := migrations.ApplyConsumer(ctx, w.conn); err != nil {
		t.Errorf("apply the consumer migrations: %v", err)
	}
	check("migrations.ApplyConsumer")
	handled := startConsumer(t, w)
	runStreamConsumerBriefly(t, w.db)
	check("the stream consumer library")

	for i, as := range []struct {
		name string
		env  []string
	}{{"walbox_relay", asRelay}, {"the superuser", asSuper}} {
		r := w.startRelay(as.env...)
		r.waitState("streaming", 2*time.Minute)
		lsn := produce(t, w.conn, i)
		check("the producer library")
		waitFor(t, 2*time.Minute, "the record to pass the rows", func() bool { return recordedPast(t, w.conn, w.slot, lsn) })
		waitFor(t, 2*time.Minute, "the consumer to handle the rows", func() bool { return handled.Load() >= int64(3*(i+1)) })
		check("the consumer library")
		for _, cmd := range [][]string{{"status"}, {"doctor", "--relay-role", "walbox_relay"}} {
			for _, as := range []struct {
				name string
				env  []string
			}{{"the superuser", asSuper}, {"walbox_relay", asRelay}} {
				out, code := w.walbox(as.env, cmd...)
				t.Logf("walbox %s as %s exited %d", cmd[0], as.name, code)
				if code != 0 && cmd[0] == "status" {
					t.Errorf("walbox status as %s exited %d:\n%s", as.name, code, out)
				}
				check("walbox " + cmd[0] + " as " + as.name)
			}
		}
		if code := r.Stop(30 * time.Second); code != 0 {
			t.Logf("walbox run as %s exited %d", as.name, code)
		}
		check("walbox run as " + as.name)
	}

	for _, cmd := range [][]string{{"prune", "--older-than", "1h"}, {"recover", "--dry-run"}} {
		for _, as := range []struct {
			name string
			env  []string
		}{{"walbox_relay", asRelay}, {"the superuser", asSuper}} {
			out, code := w.walbox(as.env, cmd...)
			t.Logf("walbox %s as %s exited %d:\n%s", strings.Join(cmd, " "), as.name, code, testenv.Tail(out, 5))
			check("walbox " + cmd[0] + " as " + as.name)
		}
	}
	// A slot dropped: recover republishes the gap from the tables and replaces the slot.
	pg.Exec(t, super, "SELECT pg_catalog.pg_drop_replication_slot($1)", w.slot)
	out, code := w.walbox(asSuper, "recover")
	if code != 0 {
		t.Errorf("walbox recover as the superuser after the slot was dropped exited %d:\n%s", code, out)
	}
	check("walbox recover as the superuser")
	out, _ = w.walbox(asRelay, "status")
	check("walbox status as walbox_relay after recover")
	t.Logf("after recover, walbox status:\n%s", testenv.Tail(out, 8))
	for _, as := range []struct {
		name string
		env  []string
	}{{"walbox_relay", asRelay}, {"the superuser", asSuper}} {
		out, code := w.walbox(as.env, "reshard", "--shards", "2")
		t.Logf("walbox reshard --shards 2 as %s exited %d:\n%s", as.name, code, testenv.Tail(out, 5))
		check("walbox reshard as " + as.name)
	}
	if t.Failed() {
		return
	}
	t.Logf("SUMMARY %s planted=%d builtins=%d calls_captured=0", t.Name(), planted, len(names))
}

// produce writes three messages in one transaction through the producer library, on a
// connection with the default search_path: one row, one logical decoding message, and a row of
// the mapped table. It returns the server's WAL position after the commit.
func produce(t *testing.T, conn *pgx.Conn, round int) string {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	msg := func(kind string) outbox.Message {
		return outbox.Message{AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", round), EventType: "order." + kind,
			Payload: []byte(`{"round":` + strconv.Itoa(round) + `}`), CreatedAt: time.Now()}
	}
	if err := outbox.Write(ctx, tx, msg("written")); err != nil {
		t.Fatalf("outbox.Write: %v", err)
	}
	if err := outbox.Emit(ctx, tx, msg("emitted")); err != nil {
		t.Fatalf("outbox.Emit: %v", err)
	}
	if err := outbox.NewWriter(outbox.Table{Schema: "legacy", Name: "events"}).Write(ctx, tx, msg("mapped")); err != nil {
		t.Fatalf("write legacy.events: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var lsn string
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_current_wal_lsn()::pg_catalog.text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

// startConsumer runs the consumer library on a queue of its own bound to the world's exchange,
// until the test ends, and returns the count of messages it handled.
func startConsumer(t *testing.T, w *world) *atomic.Int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pool, err := pgxpool.New(ctx, w.db)
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	c, err := consumer.New(pool, consumer.Config{AMQPURL: w.rabbit.URL(), Queue: w.queue + ".consumer",
		Bindings: []consumer.Binding{{Exchange: w.exchange, Key: "#"}}, OnError: func(err error) { t.Logf("consumer: %v", err) }},
		func(context.Context, pgx.Tx, consumer.Delivery) error {
			handled.Add(1)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("consumer: %v", err)
		}
		pool.Close()
	})
	return &handled
}

// runStreamConsumerBriefly runs the stream consumer library on dbURL against a broker that is not
// there: before it dials, it creates its offset table and reads the stored offset.
func runStreamConsumerBriefly(t *testing.T, dbURL string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	failed := make(chan error, 1)
	c, err := streamconsumer.New(pool, streamconsumer.Config{URIs: []string{"rabbitmq-stream://guest:guest@127.0.0.1:1/%2f"},
		Stream: "planted", ConsumerName: "planted", OnError: func(err error) {
			select {
			case failed <- err:
			default:
			}
		}}, func(context.Context, pgx.Tx, consumer.Delivery) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case err := <-failed:
		t.Logf("stream consumer without a broker: %v", err)
	case err := <-done:
		t.Fatalf("the stream consumer stopped: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the stream consumer did not try the broker within a minute")
	}
	cancel()
	<-done
	var created bool
	if err := pool.QueryRow(context.Background(), "SELECT pg_catalog.to_regclass('public.walbox_stream_offsets') IS NOT NULL").Scan(&created); err != nil || !created {
		t.Errorf("the stream consumer did not create its offset table (%v)", err)
	}
}

// recordedPast reports whether walbox's record of slot is at or past lsn.
func recordedPast(t *testing.T, conn *pgx.Conn, slot, lsn string) bool {
	t.Helper()
	var ok bool
	err := conn.QueryRow(context.Background(), `SELECT coalesce((SELECT confirmed_lsn >= $2::pg_catalog.pg_lsn
		FROM public.walbox_slots WHERE slot_name = $1), false)`, slot, lsn).Scan(&ok)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// captured returns the calls the planted overloads recorded, oldest first.
func captured(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	var rows []string
	err := conn.QueryRow(context.Background(), `SELECT coalesce(pg_catalog.array_agg(fn || ' as ' || who), '{}')
		FROM public.captured`).Scan(&rows)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func capturedCount(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	return len(captured(t, conn))
}

// plantedRegistry is a walbox_slots and the five record functions, as a role that may CREATE in a
// mapped table's schema plants them there: the record of the slot far ahead, and every call of a
// function logged in %[1]s.calls.
const plantedRegistry = `CREATE TABLE %[1]s.walbox_slots (slot_name text PRIMARY KEY, system_identifier text NOT NULL,
		timeline integer NOT NULL, origin text NOT NULL, created_lsn pg_lsn, confirmed_lsn pg_lsn NOT NULL, confirmed_xmin xid8,
		confirmed_at timestamptz NOT NULL DEFAULT now(), first_recorded_at timestamptz NOT NULL DEFAULT now(), coverage text,
		stop_reason text, stop_lsn pg_lsn, stopped_at timestamptz);
	GRANT SELECT ON %[1]s.walbox_slots TO PUBLIC;
	INSERT INTO %[1]s.walbox_slots (slot_name, system_identifier, timeline, origin, confirmed_lsn)
		SELECT slot_name, system_identifier, timeline, origin, 'FF/FFFFFFFF' FROM public.walbox_slots;
	CREATE TABLE %[1]s.calls (fn text NOT NULL, who text NOT NULL DEFAULT current_user);
	GRANT INSERT ON %[1]s.calls TO PUBLIC;
	CREATE FUNCTION %[1]s.walbox_slot_register(text, text, integer, text, pg_lsn, pg_lsn, xid8) RETURNS boolean LANGUAGE sql AS
		$$ INSERT INTO %[1]s.calls (fn) VALUES ('walbox_slot_register'); SELECT true $$;
	CREATE FUNCTION %[1]s.walbox_slot_confirm(text, integer, pg_lsn, xid8) RETURNS pg_lsn LANGUAGE sql AS
		$$ INSERT INTO %[1]s.calls (fn) VALUES ('walbox_slot_confirm'); SELECT 'FF/FFFFFFFF'::pg_lsn $$;
	CREATE FUNCTION %[1]s.walbox_slot_coverage(text, text) RETURNS text LANGUAGE sql AS
		$$ INSERT INTO %[1]s.calls (fn) VALUES ('walbox_slot_coverage'); SELECT $2 $$;
	CREATE FUNCTION %[1]s.walbox_slot_widen_coverage(text, text, text) RETURNS text LANGUAGE sql AS
		$$ INSERT INTO %[1]s.calls (fn) VALUES ('walbox_slot_widen_coverage'); SELECT $3 $$;
	CREATE FUNCTION %[1]s.walbox_slot_stop(text, text, pg_lsn) RETURNS text LANGUAGE sql AS
		$$ INSERT INTO %[1]s.calls (fn) VALUES ('walbox_slot_stop'); SELECT $2 $$`

// A role that may CREATE in the schema of a mapped table plants a registry there whose record of
// the slot is far ahead (before issue 33, walbox read the record furthest ahead among the mapped
// schemas). walbox run reads and writes only the registry of --table's schema, and never calls
// the planted functions; walbox doctor fails, naming them.
func TestRecordPlantedInAMappedSchemaIsIgnored(t *testing.T) {
	heavy(t)
	pg := testenv.SharedPostgres(t)
	testenv.RequireOwn(t, pg)
	w := newWorld(t, pg, testenv.SharedRabbit(t))
	planterURL := roleURL(t, pg, w.db, "LOGIN")
	planter := pgx.Identifier{roleName(t, planterURL)}.Sanitize()
	pg.Exec(t, w.db, "CREATE SCHEMA legacy AUTHORIZATION "+planter+
		"; CREATE TABLE legacy.events (LIKE public.outbox INCLUDING ALL); ALTER PUBLICATION walbox ADD TABLE legacy.events")
	t.Cleanup(func() { pg.Exec(t, w.db, "DROP SCHEMA legacy CASCADE") })
	config := filepath.Join(t.TempDir(), "walbox.yaml")
	if err := os.WriteFile(config, []byte("tables:\n  - table: public.outbox\n  - table: legacy.events\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"WALBOX_CONFIG=" + config}
	r := w.startRelay(env...)
	r.waitState("streaming", 2*time.Minute)
	r.Stop(30 * time.Second)
	pg.Exec(t, planterURL, fmt.Sprintf(plantedRegistry, "legacy"))

	r = w.startRelay(env...)
	r.waitState("streaming", 2*time.Minute)
	var lsns []string
	for round := range 2 {
		lsns = append(lsns, produce(t, w.conn, round))
	}
	last := lsns[len(lsns)-1]
	waitFor(t, 2*time.Minute, "the slot to pass the rows", func() bool {
		var ok bool
		err := w.conn.QueryRow(context.Background(), `SELECT confirmed_flush_lsn >= $2::pg_catalog.pg_lsn
			FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, w.slot, last).Scan(&ok)
		return err == nil && ok
	})
	var calls []string
	if err := w.conn.QueryRow(context.Background(),
		"SELECT coalesce(pg_catalog.array_agg(fn || ' as ' || who), '{}') FROM legacy.calls").Scan(&calls); err != nil {
		t.Fatal(err)
	}
	if len(calls) > 0 {
		t.Errorf("walbox run called the functions planted in legacy: %s", strings.Join(calls, ", "))
	}
	if !recordedPast(t, w.conn, w.slot, last) {
		t.Errorf("public.walbox_slots did not record the rows walbox run confirmed")
	}
	r.Stop(30 * time.Second)
	// With --table in a schema that holds no registry, run neither creates one there nor takes the
	// one planted in legacy.
	pg.Exec(t, w.db, "CREATE SCHEMA elsewhere")
	out, code := w.walbox(append(env, "WALBOX_TABLE=elsewhere.outbox"), "run")
	if code != 1 || !strings.Contains(out, "elsewhere.walbox_slots does not exist, but legacy.walbox_slots") {
		t.Errorf("walbox run with --table in a schema without a registry exited %d, want 1 naming the registry in legacy:\n%s", code, out)
	}
	out, _ = w.walbox(env, "doctor")
	for _, want := range []string{"FAIL  ", "legacy.walbox_slots (owner ", "legacy.walbox_slot_confirm("} {
		if !strings.Contains(out, want) {
			t.Errorf("walbox doctor with a registry planted in legacy does not say %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "matches walbox's record") || strings.Contains(out, "FF/FFFFFFFF") {
		t.Errorf("walbox doctor should judge the slot by public.walbox_slots, not the record planted in legacy:\n%s", out)
	}
}

// roleURL creates a role with attrs, dropped with the test, and returns dbURL for it.
func roleURL(t *testing.T, pg *testenv.Postgres, dbURL, attrs string) string {
	t.Helper()
	role := testenv.UniqueName("role")
	ident := pgx.Identifier{role}.Sanitize()
	pg.Exec(t, dbURL, "CREATE ROLE "+ident+" "+attrs)
	t.Cleanup(func() {
		pg.Exec(t, dbURL, "DROP OWNED BY "+ident)
		pg.Exec(t, dbURL, "DROP ROLE "+ident)
	})
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

func roleName(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.User.Username()
}

// The application role owns the database, so it may create walbox_migrations in public before
// the first `walbox migrate`, with a trigger that takes back the session's own role (RESET ROLE,
// which undoes a SET ROLE in a superuser's session) and records current_user, and rows that say
// the registry is migrated. The superuser's migrate neither writes that table nor believes it:
// the trigger never runs, and the registry is created.
func TestMigrationsTableOfAnotherRoleRunsNothingAsTheMigrator(t *testing.T) {
	heavy(t)
	pg := testenv.SharedPostgres(t)
	testenv.RequireOwn(t, pg)
	super, appDB, _ := appOwnedDatabase(t, pg)
	pg.Exec(t, appDB, `CREATE TABLE public.walbox_migrations (target text NOT NULL, version int NOT NULL, name text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (target, version));
		INSERT INTO public.walbox_migrations (target, version, name)
			SELECT 'registry:public', v, 'planted' FROM unnest(ARRAY[1, 2, 3, 5, 6, 7]) v;
		CREATE TRIGGER planted BEFORE INSERT ON public.walbox_migrations FOR EACH ROW EXECUTE FUNCTION public.planted()`)
	w := &world{t: t, pg: pg, db: super, relayDB: super, slot: testenv.UniqueName("slot")}
	w.conn = pg.Conn(t, super)
	for range 2 {
		if out, code := w.walbox(nil, "migrate"); code != 0 {
			t.Fatalf("walbox migrate as the superuser exited %d:\n%s", code, out)
		}
	}
	if rows := captured(t, w.conn); len(rows) > 0 {
		t.Errorf("the trigger planted on walbox_migrations ran: %s", strings.Join(rows, ", "))
	}
	var registry bool
	if err := w.conn.QueryRow(context.Background(), `SELECT pg_catalog.to_regclass('public.walbox_slots') IS NOT NULL
		AND pg_catalog.to_regprocedure('public.walbox_slot_confirm(text, integer, pg_lsn, xid8)') IS NOT NULL`).Scan(&registry); err != nil {
		t.Fatal(err)
	}
	if !registry {
		t.Error("walbox migrate took the planted rows of walbox_migrations for its own and created no registry")
	}
}

// The application role owns the database and runs `walbox migrate` itself, so it owns
// walbox_slots and walbox_relay_roles, and it adds a trigger to each that takes back the
// session's own role (RESET ROLE) and records current_user. `walbox recover` and `walbox migrate
// --relay-role`, run by a superuser, refuse to write those tables, naming their owner and the way
// out: the triggers never run. Run by the owner, recover does its work.
func TestRecordTableTriggerRunsNothingAsRecover(t *testing.T) {
	heavy(t)
	pg := testenv.SharedPostgres(t)
	testenv.RequireOwn(t, pg)
	rabbit := testenv.SharedRabbit(t)
	super, appDB, app := appOwnedDatabase(t, pg)
	w := &world{t: t, pg: pg, rabbit: rabbit, db: super, relayDB: super, relayMQ: rabbit.URL(), slot: testenv.UniqueName("slot"),
		exchange: testenv.UniqueName("ex"), queue: testenv.UniqueName("q"), binding: "#"}
	w.conn = pg.Conn(t, super)
	relay := roleName(t, roleURL(t, pg, super, "LOGIN REPLICATION"))
	if out, code := w.walbox([]string{"WALBOX_DATABASE_URL=" + appDB}, "migrate", "--no-slot"); code != 0 {
		t.Fatalf("walbox migrate --no-slot as the database's owner exited %d:\n%s", code, out)
	}
	if out, code := w.walbox(nil, "migrate"); code != 0 {
		t.Fatalf("walbox migrate as the superuser exited %d:\n%s", code, out)
	}
	w.declare()
	pg.Exec(t, appDB, `CREATE TRIGGER planted BEFORE INSERT OR UPDATE OR DELETE ON public.walbox_slots
			FOR EACH ROW EXECUTE FUNCTION public.planted();
		CREATE TRIGGER planted BEFORE INSERT OR UPDATE OR DELETE ON public.walbox_relay_roles
			FOR EACH ROW EXECUTE FUNCTION public.planted()`)
	out, code := w.walbox(nil, "migrate", "--relay-role", relay)
	if code == 0 || !strings.Contains(out, "public.walbox_relay_roles belongs to "+app) || !strings.Contains(out, "ALTER TABLE public.walbox_relay_roles OWNER TO") {
		t.Errorf("walbox migrate --relay-role as the superuser exited %d, want a refusal naming %s and the way out:\n%s", code, app, out)
	}
	pg.Exec(t, super, "INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'order.placed', '{}')")
	pg.Exec(t, super, "SELECT pg_catalog.pg_drop_replication_slot($1)", w.slot)
	out, code = w.walbox(nil, "recover")
	if code == 0 || !strings.Contains(out, "public.walbox_slots belongs to "+app) || !strings.Contains(out, "run walbox recover as "+app) {
		t.Errorf("walbox recover as the superuser exited %d, want a refusal naming %s and the way out:\n%s", code, app, out)
	}
	if rows := captured(t, w.conn); len(rows) > 0 {
		t.Errorf("the triggers planted on the application role's registry ran: %s", strings.Join(rows, ", "))
	}
	// The way out: the owner, given REPLICATION, runs recover itself; its trigger runs as itself.
	pg.Exec(t, super, "ALTER ROLE "+pgx.Identifier{app}.Sanitize()+" REPLICATION")
	if out, code := w.walbox([]string{"WALBOX_DATABASE_URL=" + appDB}, "recover"); code != 0 {
		t.Fatalf("walbox recover as the owner exited %d:\n%s", code, out)
	}
	ranOnlyAs(t, w.conn, app, "walbox_slots")

	// prune, run by the superuser, deletes no row of the application role's table: its DELETE
	// trigger would run as the superuser.
	pg.Exec(t, super, "TRUNCATE public.captured")
	pg.Exec(t, appDB, "CREATE TRIGGER planted BEFORE DELETE ON public.outbox FOR EACH ROW EXECUTE FUNCTION public.planted()")
	time.Sleep(2 * time.Second) // the row is older than --older-than
	out, code = w.walbox(nil, "prune", "--older-than", "1s")
	if code == 0 || !strings.Contains(out, "run walbox prune as "+app) {
		t.Errorf("walbox prune as the superuser exited %d, want a refusal naming %s:\n%s", code, app, out)
	}
	if rows := captured(t, w.conn); len(rows) > 0 {
		t.Errorf("walbox prune as the superuser ran the application role's trigger: %s", strings.Join(rows, ", "))
	}
}

// The application role owns the database and made the outbox table and walbox_slots itself, with
// a trigger on walbox_slots, before a superuser's first `walbox migrate`. The record functions
// that migrate creates would run as the superuser, and run the trigger with its rights at every
// confirm: migrate refuses, naming both owners, and the trigger never runs.
func TestRecordFunctionsRunNoTriggerOfTheTablesOwner(t *testing.T) {
	heavy(t)
	pg := testenv.SharedPostgres(t)
	testenv.RequireOwn(t, pg)
	super, appDB, app := appOwnedDatabase(t, pg)
	pg.Exec(t, appDB, `CREATE TABLE public.outbox (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregate_type text NOT NULL,
			aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb NOT NULL, headers jsonb NOT NULL DEFAULT '{}',
			created_at timestamptz NOT NULL DEFAULT now());
		CREATE TABLE public.walbox_slots (slot_name text PRIMARY KEY, system_identifier text NOT NULL,
			timeline integer NOT NULL, origin text NOT NULL, created_lsn pg_lsn, confirmed_lsn pg_lsn NOT NULL, confirmed_xmin xid8,
			confirmed_at timestamptz NOT NULL DEFAULT now(), first_recorded_at timestamptz NOT NULL DEFAULT now(), coverage text,
			stop_reason text, stop_lsn pg_lsn, stopped_at timestamptz);
		CREATE TRIGGER planted BEFORE INSERT OR UPDATE ON public.walbox_slots FOR EACH ROW EXECUTE FUNCTION public.planted()`)
	w := &world{t: t, pg: pg, db: super, relayDB: super, slot: testenv.UniqueName("slot")}
	w.conn = pg.Conn(t, super)
	t.Cleanup(func() {
		w.conn.Exec(context.Background(), "SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM pg_catalog.pg_replication_slots WHERE slot_name = $1", w.slot) //nolint:errcheck // the slot may not exist
	})
	out, code := w.walbox(nil, "migrate")
	if code == 0 || !strings.Contains(out, "public.walbox_slots belongs to "+app+", but the record functions that write it run as") {
		t.Errorf("walbox migrate as the superuser over the application role's walbox_slots exited %d, want a refusal naming both owners:\n%s", code, out)
	}
	if rows := captured(t, w.conn); len(rows) > 0 {
		t.Errorf("the trigger planted on walbox_slots ran: %s", strings.Join(rows, ", "))
	}
	// The way out the refusal names: the superuser checks the table and takes it.
	pg.Exec(t, super, "DROP TRIGGER planted ON public.walbox_slots; ALTER TABLE public.walbox_slots OWNER TO CURRENT_USER")
	if out, code := w.walbox(nil, "migrate"); code != 0 {
		t.Fatalf("walbox migrate as the superuser, once it owns walbox_slots, exited %d:\n%s", code, out)
	}

	// A registry left in that state (migrated before migrate checked it): walbox run refuses it
	// before it calls a record function.
	pg.Exec(t, super, "ALTER TABLE public.walbox_slots OWNER TO "+pgx.Identifier{app}.Sanitize())
	pg.Exec(t, appDB, `CREATE TRIGGER planted BEFORE INSERT OR UPDATE ON public.walbox_slots FOR EACH ROW EXECUTE FUNCTION public.planted();
		INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'order.placed', '{}')`)
	rabbit := testenv.SharedRabbit(t)
	w.rabbit, w.relayMQ, w.exchange, w.queue, w.binding = rabbit, rabbit.URL(), testenv.UniqueName("ex"), testenv.UniqueName("q"), "#"
	w.declare()
	r := w.startRelay()
	waitFor(t, 2*time.Minute, "walbox run to stop, or the trigger to run", func() bool { return r.Exited() || capturedCount(t, w.conn) > 0 })
	if rows := captured(t, w.conn); len(rows) > 0 {
		t.Errorf("walbox run ran the trigger planted on walbox_slots: %s", strings.Join(rows, ", "))
	}
	if !r.Exited() || !strings.Contains(r.Output(), "public.walbox_slots belongs to "+app+", but the record functions that write it run as") {
		t.Errorf("walbox run over record functions of another owner than walbox_slots: want a refusal naming both owners:\n%s", testenv.Tail(r.Output(), 10))
	}
	r.Stop(30 * time.Second)
}

// The application role owns the database and ran `walbox migrate` itself, so the record
// functions run with its rights. It adds a deferred trigger to walbox_slots: before PostgreSQL 18
// that fires at the commit of the relay's confirm, with the session's role. walbox run, run by a
// superuser, refuses such a registry, and the trigger never runs as the superuser.
func TestRunAsASuperuserRefusesTheApplicationsRecordFunctions(t *testing.T) {
	heavy(t)
	pg := testenv.SharedPostgres(t)
	testenv.RequireOwn(t, pg)
	rabbit := testenv.SharedRabbit(t)
	super, appDB, app := appOwnedDatabase(t, pg)
	w := &world{t: t, pg: pg, rabbit: rabbit, db: super, relayDB: super, relayMQ: rabbit.URL(), slot: testenv.UniqueName("slot"),
		exchange: testenv.UniqueName("ex"), queue: testenv.UniqueName("q"), binding: "#"}
	w.conn = pg.Conn(t, super)
	if out, code := w.walbox([]string{"WALBOX_DATABASE_URL=" + appDB}, "migrate", "--no-slot"); code != 0 {
		t.Fatalf("walbox migrate --no-slot as the database's owner exited %d:\n%s", code, out)
	}
	if out, code := w.walbox(nil, "migrate"); code != 0 {
		t.Fatalf("walbox migrate as the superuser exited %d:\n%s", code, out)
	}
	w.declare()
	pg.Exec(t, appDB, `CREATE CONSTRAINT TRIGGER planted AFTER INSERT OR UPDATE ON public.walbox_slots
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.planted();
		INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'order.placed', '{}')`)
	r := w.startRelay()
	waitFor(t, 2*time.Minute, "walbox run to stop, or the trigger to run", func() bool {
		for _, row := range captured(t, w.conn) {
			if !strings.HasSuffix(row, " as "+app) {
				return true
			}
		}
		return r.Exited()
	})
	for _, row := range captured(t, w.conn) {
		if !strings.HasSuffix(row, " as "+app) {
			t.Errorf("walbox run as the superuser ran the application role's deferred trigger: %s", row)
		}
	}
	if !r.Exited() || !strings.Contains(r.Output(), "the record functions in public belong to "+app) {
		t.Errorf("walbox run as the superuser over the application role's record functions: want a refusal naming %s:\n%s",
			app, testenv.Tail(r.Output(), 10))
	}
	r.Stop(30 * time.Second)
}

// The application role owns the database and makes walbox_slots a view, over a function of its
// own, before the first migrate. migrate cannot create the registry, and the superuser runs walbox
// doctor and walbox status to see why: neither reads the view, which would run the function as the
// superuser; both name it.
func TestRecordViewRunsNothingAsTheReader(t *testing.T) {
	heavy(t)
	pg := testenv.SharedPostgres(t)
	testenv.RequireOwn(t, pg)
	rabbit := testenv.SharedRabbit(t)
	super, appDB, _ := appOwnedDatabase(t, pg)
	pg.Exec(t, appDB, `CREATE TABLE public.outbox (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregate_type text NOT NULL,
			aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb NOT NULL, headers jsonb NOT NULL DEFAULT '{}',
			created_at timestamptz NOT NULL DEFAULT now());
		CREATE FUNCTION public.planted_rows() RETURNS SETOF record LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO public.captured (fn, who) VALUES ('walbox_slots view', current_user);
			RETURN;
		END $$;
		CREATE VIEW public.walbox_slots AS SELECT * FROM public.planted_rows() AS t(slot_name text, system_identifier text,
			timeline integer, origin text, created_lsn pg_lsn, confirmed_lsn pg_lsn, confirmed_xmin xid8, confirmed_at timestamptz,
			first_recorded_at timestamptz, coverage text, stop_reason text, stop_lsn pg_lsn, stopped_at timestamptz)`)
	w := &world{t: t, pg: pg, rabbit: rabbit, db: super, relayDB: super, relayMQ: rabbit.URL(), slot: testenv.UniqueName("slot"),
		exchange: testenv.UniqueName("ex"), queue: testenv.UniqueName("q"), binding: "#"}
	w.conn = pg.Conn(t, super)
	for _, cmd := range []string{"doctor", "status"} {
		out, _ := w.walbox(nil, cmd)
		if !strings.Contains(out, "public.walbox_slots (owner ") || !strings.Contains(out, "is a relation of kind v") {
			t.Errorf("walbox %s over a view walbox_slots does not name it:\n%s", cmd, out)
		}
		if rows := captured(t, w.conn); len(rows) > 0 {
			t.Errorf("walbox %s as the superuser read the view walbox_slots: %s", cmd, strings.Join(rows, ", "))
		}
	}
}

// appOwnedDatabase creates a role and a database it owns, with public.captured, which any role
// may insert into, and the trigger function public.planted, which takes back the session's own
// role if it may (RESET ROLE) and records current_user there. It
// returns the database's URL for the superuser and for the role, and the role's name.
func appOwnedDatabase(t *testing.T, pg *testenv.Postgres) (super, appDB, app string) {
	t.Helper()
	admin := pg.NewDatabase(t)
	appURL := roleURL(t, pg, admin, "LOGIN")
	app = roleName(t, appURL)
	dbName := testenv.UniqueName("app")
	pg.Exec(t, admin, "CREATE DATABASE "+dbName+" OWNER "+pgx.Identifier{app}.Sanitize())
	t.Cleanup(func() { pg.Exec(t, admin, "DROP DATABASE "+dbName+" WITH (FORCE)") })
	at := func(dbURL string) string {
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/" + dbName
		return u.String()
	}
	super, appDB = at(admin), at(appURL)
	pg.Exec(t, appDB, `CREATE TABLE public.captured (fn text NOT NULL, who text NOT NULL);
		GRANT INSERT ON public.captured TO PUBLIC;
		CREATE FUNCTION public.planted() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			BEGIN
				RESET ROLE;
			EXCEPTION WHEN OTHERS THEN
				NULL;
			END;
			INSERT INTO public.captured (fn, who) VALUES (TG_TABLE_NAME || ' trigger', current_user);
			IF TG_OP = 'DELETE' THEN
				RETURN OLD;
			END IF;
			RETURN NEW;
		END $$`)
	return super, appDB, app
}

// ranOnlyAs fails the test unless the trigger planted on table ran, and only as role.
func ranOnlyAs(t *testing.T, conn *pgx.Conn, role, table string) {
	t.Helper()
	rows := captured(t, conn)
	if len(rows) == 0 {
		t.Fatalf("the trigger planted on %s never ran: walbox did not write it", table)
	}
	for _, r := range rows {
		if r != table+" trigger as "+role {
			t.Errorf("the trigger planted on %s ran %s; want it to run as the table's owner, %s, only", table, r, role)
		}
	}
}
