package inspect_test

import (
	"testing"

	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/wire"
)

// A publication FOR TABLES IN SCHEMA covers an outbox table through pg_publication_namespace,
// not pg_publication_rel. Dropping the schema from it and adding it again leaves a gap in which
// rows written to the table were not decoded: the coverage identity must change, as it does for
// a table dropped from a FOR TABLE publication and added again, or the watch and the recorded
// coverage (watch.pinCoverage) pass over the gap.
func TestIdentitySeesASchemaDroppedFromThePublicationAndAddedAgain(t *testing.T) {
	_, _, conn := setup(t)
	ctx := t.Context()
	for _, sql := range []string{"CREATE SCHEMA s", "CREATE TABLE s.outbox (LIKE public.outbox INCLUDING ALL)",
		"CREATE PUBLICATION p FOR TABLES IN SCHEMA s"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	tables := []wire.Table{{Schema: "s", Name: "outbox"}}
	before, err := inspect.ReadCoverage(ctx, conn, "p", tables)
	if err != nil || before.Err() != nil {
		t.Fatalf("before: %v, %v", err, before.Err())
	}
	for _, sql := range []string{"ALTER PUBLICATION p DROP TABLES IN SCHEMA s",
		"INSERT INTO s.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'o', '1', 'in the gap', '{}')",
		"ALTER PUBLICATION p ADD TABLES IN SCHEMA s"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	after, err := inspect.ReadCoverage(ctx, conn, "p", tables)
	if err != nil || after.Err() != nil {
		t.Fatalf("after: %v, %v", err, after.Err())
	}
	if after.Identity == before.Identity {
		t.Fatalf("coverage identity %q unchanged although the schema left the publication and a row was written meanwhile", after.Identity)
	}
}
