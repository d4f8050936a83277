package faults_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/outbox"
	walboxwire "github.com/walbox/walbox/wire"
)

// operatorTypes and operatorNames are what the planted operators take and are called: the types
// of the columns, parameters and literals in walbox's SQL, and the operators between them.
var (
	operatorTypes = []string{"name", "text", "oid", "regclass", "regnamespace", "regproc", "regrole", "smallint", "integer",
		"bigint", `"char"`, "boolean", "uuid", "jsonb", "pg_lsn", "xid8", "timestamptz", "varchar", "name[]", "text[]", "oid[]"}
	operatorNames = []string{"=", "<>", "<", ">", "<=", ">=", "||", "~~", "@>", "-", "+"}
)

// plantedOperators plants, in public, operator %[1]s from type %[2]s to each of the types %[3]s
// that pg_catalog has no exact operator for but resolves by an implicit cast (oid = regclass,
// name || name, oid = integer). Operator resolution takes an exact match anywhere on the path
// over pg_catalog's cast one, even with pg_catalog first. Each records the call, then applies
// pg_catalog's operator.
const plantedOperators = `DO $gen$
DECLARE
	op text := %[1]s; l text := %[2]s; r text; ret text; body text;
BEGIN
	FOREACH r IN ARRAY %[3]s::pg_catalog.text[] LOOP
		CONTINUE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_operator o
			WHERE o.oprnamespace = 'pg_catalog'::pg_catalog.regnamespace AND o.oprname = op
			  AND o.oprleft = l::pg_catalog.regtype AND o.oprright = r::pg_catalog.regtype);
		body := pg_catalog.format('$1 OPERATOR(pg_catalog.%%s) $2', op);
		BEGIN
			EXECUTE pg_catalog.format('SELECT pg_catalog.pg_typeof(NULL::%%s OPERATOR(pg_catalog.%%s) NULL::%%s)::text', l, op, r) INTO ret;
		EXCEPTION WHEN OTHERS THEN
			BEGIN
				EXECUTE pg_catalog.format('SELECT pg_catalog.pg_typeof(NULL::%%s::text OPERATOR(pg_catalog.%%s) NULL::%%s::text)::text', l, op, r) INTO ret;
				body := pg_catalog.format('$1::text OPERATOR(pg_catalog.%%s) $2::text', op);
			EXCEPTION WHEN OTHERS THEN
				CONTINUE;
			END;
		END;
		EXECUTE pg_catalog.format('CREATE FUNCTION public.%%I(%%s, %%s) RETURNS %%s LANGUAGE sql AS %%L', 'captured_' || pg_catalog.md5(op), l, r, ret,
			pg_catalog.format('INSERT INTO public.captured (fn, who) VALUES (%%L, current_user); SELECT %%s',
				'OPERATOR ' || op || ' (' || l || ', ' || r || ')', body));
		EXECUTE pg_catalog.format('CREATE OPERATOR public.%%s (LEFTARG = %%s, RIGHTARG = %%s, FUNCTION = public.%%I)', op, l, r,
			'captured_' || pg_catalog.md5(op));
	END LOOP;
END
$gen$`

// The application role owns the database and plants, in public, an operator for every pair of
// types that pg_catalog compares, joins or concatenates only through a cast. The producer,
// consumer and migrations libraries, called by a superuser on a connection with the default
// search_path (public on it, as an application's is), run none of them.
func TestPlantedOperatorsNeverRunInTheLibraries(t *testing.T) {
	heavy(t)
	pg := testenv.SharedPostgres(t)
	testenv.RequireOwn(t, pg)
	ctx := context.Background()
	super, appDB, _ := appOwnedDatabase(t, pg)
	relay := roleName(t, roleURL(t, pg, super, "LOGIN REPLICATION"))
	planter := pg.Conn(t, appDB)
	literal := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	quoted := make([]string, len(operatorTypes))
	for i, typ := range operatorTypes {
		quoted[i] = `"` + strings.ReplaceAll(typ, `"`, `\"`) + `"`
	}
	for _, op := range operatorNames {
		for _, l := range operatorTypes {
			if _, err := planter.Exec(ctx, fmt.Sprintf(plantedOperators, literal(op), literal(l), literal("{"+strings.Join(quoted, ",")+"}"))); err != nil {
				t.Fatalf("plant the operators %s from %s: %v", op, l, err)
			}
		}
	}
	var planted int
	if err := planter.QueryRow(ctx, `SELECT pg_catalog.count(*) FROM pg_catalog.pg_operator
		WHERE oprnamespace = 'public'::pg_catalog.regnamespace`).Scan(&planted); err != nil {
		t.Fatal(err)
	}
	t.Logf("planted %d operators in public", planted)
	// The plant works: an unqualified comparison of an oid with a regclass runs it.
	if _, err := planter.Exec(ctx, "SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = 'pg_catalog.pg_class'::pg_catalog.regclass"); err != nil {
		t.Fatal(err)
	}
	if capturedCount(t, planter) == 0 {
		t.Fatal("the application role's own oid = regclass did not run the planted operator")
	}
	if _, err := planter.Exec(ctx, "TRUNCATE public.captured"); err != nil {
		t.Fatal(err)
	}

	conn := pg.Conn(t, super)
	var path string
	if err := conn.QueryRow(ctx, "SHOW search_path").Scan(&path); err != nil || !strings.Contains(path, "public") {
		t.Fatalf("the superuser's search_path is %q (%v), want the default, with public", path, err)
	}
	var seen int
	check := func(step string) {
		t.Helper()
		rows := captured(t, conn)
		if len(rows) > seen {
			t.Errorf("%s ran planted operators:\n  %s", step, strings.Join(distinct(rows[seen:]), "\n  "))
			seen = len(rows)
		}
	}
	for range 2 { // the first run creates everything; the second finds it there
		if _, err := migrations.Apply(ctx, conn, migrations.Config{RelayRole: relay}); err != nil {
			t.Errorf("migrations.Apply: %v", err)
		}
		check("migrations.Apply")
	}
	if err := migrations.RestrictRegistry(ctx, conn, "public", relay); err != nil {
		t.Errorf("migrations.RestrictRegistry: %v", err)
	}
	check("migrations.RestrictRegistry")
	if _, _, err := migrations.ReadOwner(ctx, conn, "public", []walboxwire.Table{walboxwire.DefaultTable}, relay); err != nil {
		t.Errorf("migrations.ReadOwner: %v", err)
	}
	check("migrations.ReadOwner")
	if _, err := migrations.ReadRights(ctx, conn, "public"); err != nil {
		t.Errorf("migrations.ReadRights: %v", err)
	}
	check("migrations.ReadRights")
	if err := migrations.ApplyConsumer(ctx, conn); err != nil {
		t.Errorf("migrations.ApplyConsumer: %v", err)
	}
	check("migrations.ApplyConsumer")

	msg := outbox.Message{AggregateType: "order", AggregateID: "o-1", EventType: "order.placed", Payload: []byte(`{}`),
		Headers: map[string]any{"k": "v"}, CreatedAt: time.Now()}
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, w := range []*outbox.Writer{outbox.NewWriter(outbox.DefaultTable), outbox.NewWriter(outbox.DefaultTable, outbox.EmitMessages()),
			outbox.NewWriter(outbox.DefaultTable, outbox.DeleteAfterInsert())} {
			if err := w.Write(ctx, tx, msg); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("the producer library: %v", err)
	}
	check("the producer library")
	db, err := sql.Open("pgx", super)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.NewWriter(outbox.DefaultTable, outbox.DeleteAfterInsert()).WriteSQL(ctx, tx, msg); err != nil {
		t.Errorf("outbox WriteSQL: %v", err)
	}
	if err := outbox.EmitSQL(ctx, tx, msg); err != nil {
		t.Errorf("outbox.EmitSQL: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	check("the producer library through database/sql")
	runStreamConsumerBriefly(t, super)
	check("the stream consumer library")
	if !t.Failed() {
		t.Logf("SUMMARY %s operators=%d calls_captured=0", t.Name(), planted)
	}
}

// distinct returns each of rows once, with the number of times it occurs.
func distinct(rows []string) []string {
	counts := map[string]int{}
	var order []string
	for _, r := range rows {
		if counts[r] == 0 {
			order = append(order, r)
		}
		counts[r]++
	}
	for i, r := range order {
		order[i] = fmt.Sprintf("%s (%d times)", r, counts[r])
	}
	return order
}
