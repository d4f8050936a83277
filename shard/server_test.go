package shard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/internal/testenv"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/shard"
	"github.com/walbox/walbox/wire"
)

func setupDB(t *testing.T) *pgx.Conn {
	t.Helper()
	if testenv.Short() {
		t.Skip("integration test: needs PostgreSQL")
	}
	pg := testenv.SharedPostgres(t)
	conn := pg.Conn(t, pg.NewDatabase(t))
	if _, err := migrations.Apply(t.Context(), conn, migrations.Config{NoPublication: true}); err != nil {
		t.Fatal(err)
	}
	return conn
}

func base(n int) shard.Set { return shard.Set{Slot: "walbox", Publication: "walbox", N: n} }

// Property, on the server: for many ids (NULL, the empty string and non-ASCII among them) and
// many counts, the row filters the publications hold, evaluated by PostgreSQL, put every id in
// exactly one shard, the one Of computes; and PostgreSQL's hashtext agrees with HashText.
func TestFiltersOnTheServer(t *testing.T) {
	conn := setupDB(t)
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(3, 4))
	ids := []string{"", "a", "日本語", strings.Repeat("x", 100)}
	for len(ids) < 3000 {
		if id := randomID(rng); !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	mustExec(t, conn, "CREATE TABLE ids (aggregate_id text)")
	mustExec(t, conn, "INSERT INTO ids SELECT unnest($1::text[])", ids)
	mustExec(t, conn, "INSERT INTO ids VALUES (NULL)")
	// Where hashtext returns -2147483648, abs() would fail the walsender; the mask does not.
	var masked int
	if err := conn.QueryRow(ctx, "SELECT ((-2147483648)::int4 & 2147483647) % 3").Scan(&masked); err != nil || masked != 0 {
		t.Errorf("the mask of int4's minimum: %d, %v", masked, err)
	}
	if _, err := conn.Exec(ctx, "SELECT abs((-2147483648)::int4)"); err == nil {
		t.Error("abs of int4's minimum did not fail: the reason for the mask is gone")
	}

	rows, err := conn.Query(ctx, "SELECT aggregate_id, hashtext(aggregate_id) FROM ids WHERE aggregate_id IS NOT NULL")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for rows.Next() {
		var id string
		var h int32
		if err := rows.Scan(&id, &h); err != nil {
			t.Fatal(err)
		}
		if got := shard.HashText(id); got != h {
			t.Errorf("HashText(%q) = %d, the server says %d", id, got, h)
		}
		checked++
	}
	if rows.Err() != nil || checked != len(ids) {
		t.Fatalf("compared %d hashes of %d: %v", checked, len(ids), rows.Err())
	}

	for _, n := range []int{2, 3, 4, 5, 7, 8, 16} {
		if _, err := shard.CreatePublications(ctx, conn, wire.DefaultTable, base(n)); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		l, err := shard.ReadLayout(ctx, conn, wire.DefaultTable, base(0))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Check(); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		in := map[string][]int{} // id (NULL as "<null>") to the shards whose filter selected it
		for _, c := range l.Claims {
			if c.N != n {
				continue
			}
			// The filter exactly as the publication holds it, evaluated by the server.
			got, err := conn.Query(ctx, "SELECT coalesce(aggregate_id, '<null>') FROM ids WHERE "+c.Filter)
			if err != nil {
				t.Fatalf("%s: %v", c.Filter, err)
			}
			sel, err := pgx.CollectRows(got, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range sel {
				in[id] = append(in[id], c.K)
			}
		}
		for _, id := range append(ids, "<null>") {
			want := shard.Of(id, n)
			if id == "<null>" {
				want = shard.Of("", n)
			}
			if ks := in[id]; len(ks) != 1 || ks[0] != want {
				t.Errorf("n=%d: id %q is in shards %v, want exactly [%d]", n, id, ks, want)
			}
		}
	}
}

// The filters hold where it counts, in the walsender: three slots of three shards decode each
// insert exactly once between them, in the shard Of names.
func TestSlotsDecodeTheirShardOnly(t *testing.T) {
	conn := setupDB(t)
	ctx := t.Context()
	set := base(3)
	if _, err := shard.CreatePublications(ctx, conn, wire.DefaultTable, set); err != nil {
		t.Fatal(err)
	}
	for k := range 3 {
		mustExec(t, conn, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", set.SlotName(k))
	}
	want := make([]int, 3)
	for i := range 300 {
		id := fmt.Sprintf("order-%d", i)
		want[shard.Of(id, 3)]++
		mustExec(t, conn, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', $1, 'e', '{}')`, id)
	}
	for k := range 3 {
		var inserts int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
			'proto_version', '1', 'publication_names', $2) WHERE substr(data, 1, 1) = 'I'`,
			set.SlotName(k), set.PublicationName(k)).Scan(&inserts)
		if err != nil {
			t.Fatal(err)
		}
		if inserts != want[k] {
			t.Errorf("slot %s decoded %d inserts, want %d", set.SlotName(k), inserts, want[k])
		}
	}
	if want[0]+want[1]+want[2] != 300 || want[0] == 0 || want[1] == 0 || want[2] == 0 {
		t.Fatalf("the workload does not reach every shard: %v", want)
	}
}

// A count or shard that does not match the publications is refused, naming both; so is a
// publication whose filter was changed behind walbox's back.
func TestMismatchesAreRefused(t *testing.T) {
	conn := setupDB(t)
	ctx := t.Context()
	if _, err := shard.CreatePublications(ctx, conn, wire.DefaultTable, base(3)); err != nil {
		t.Fatal(err)
	}
	l, err := shard.ReadLayout(ctx, conn, wire.DefaultTable, base(0))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := l.Resolve(1, 0); err != nil || s.N != 3 {
		t.Errorf("Resolve(1, 0) = %v, %v; want the 3 shards migrate created", s, err)
	}
	if _, err := l.Resolve(1, 3); err != nil {
		t.Errorf("Resolve(1, 3): %v", err)
	}
	for _, tc := range []struct {
		k, n int
		want []string
	}{
		{0, 2, []string{"--shards 2", "walbox_s0of2", "3 shards"}},
		{3, 3, []string{"--shard 3", "0 to 2"}},
		{0, 4, []string{"--shards 4", "3 shards"}},
	} {
		_, err := l.Resolve(tc.k, tc.n)
		if !errors.Is(err, shard.ErrMismatch) || !containsAll(err.Error(), tc.want) {
			t.Errorf("Resolve(%d, %d) = %v, want ErrMismatch naming %v", tc.k, tc.n, err, tc.want)
		}
	}
	if err := l.CheckMigrate(3); err != nil {
		t.Errorf("CheckMigrate(3): %v", err)
	}
	for _, n := range []int{1, 2} {
		if err := l.CheckMigrate(n); !errors.Is(err, shard.ErrMismatch) || !strings.Contains(err.Error(), "3 shards") {
			t.Errorf("CheckMigrate(%d) = %v, want ErrMismatch naming the 3 shards", n, err)
		}
	}
	// The single slot's publication beside the shards: migrate refuses to add either to the other.
	mustExec(t, conn, "CREATE PUBLICATION walbox FOR TABLE outbox WITH (publish = 'insert')")
	if l, err = shard.ReadLayout(ctx, conn, wire.DefaultTable, base(0)); err != nil {
		t.Fatal(err)
	}
	if got := l.Counts(); len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Errorf("Counts() = %v, want [1 3]", got)
	}
	if _, err := l.Resolve(0, 0); err != nil {
		t.Errorf("Resolve(0, 0) with the single slot and 3 shards: %v", err)
	}
	if err := l.CheckMigrate(2); !errors.Is(err, shard.ErrMismatch) {
		t.Errorf("CheckMigrate(2) beside the single slot and 3 shards = %v", err)
	}

	// A filter changed behind walbox's back: shard 1's publication now selects shard 0's rows.
	mustExec(t, conn, "ALTER PUBLICATION walbox_s1of3 SET TABLE outbox WHERE "+base(3).Filter(0))
	err = shard.CheckPublication(ctx, conn, "walbox_s1of3", wire.DefaultTable, 1, 3)
	if !errors.Is(err, shard.ErrMismatch) || !containsAll(err.Error(), []string{"walbox_s1of3", "selects shard 0 of 3", "streams shard 1 of 3"}) {
		t.Errorf("CheckPublication after the filter changed = %v", err)
	}
	if l, err = shard.ReadLayout(ctx, conn, wire.DefaultTable, base(0)); err != nil {
		t.Fatal(err)
	}
	if err := l.Check(); !errors.Is(err, shard.ErrMismatch) {
		t.Errorf("Check after the filter changed = %v", err)
	}
	if _, err := shard.CreatePublications(ctx, conn, wire.DefaultTable, base(3)); !errors.Is(err, shard.ErrMismatch) {
		t.Errorf("CreatePublications over a changed filter = %v, want ErrMismatch", err)
	}
	// A set missing one publication leaves that shard's rows to no relay.
	mustExec(t, conn, "DROP PUBLICATION walbox_s1of3")
	if l, err = shard.ReadLayout(ctx, conn, wire.DefaultTable, base(0)); err != nil {
		t.Fatal(err)
	}
	if err := l.Check(); !errors.Is(err, shard.ErrMismatch) || !strings.Contains(err.Error(), "walbox_s1of3") {
		t.Errorf("Check with a publication missing = %v", err)
	}
}

func mustExec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// A publication dropped under a shard's relay, or with the outbox table taken out, is what the
// relay's coverage check reports (inspect.ErrNoPublication, inspect.ErrNotCovered), word for
// word, when the shard check sees it first: a stop only walbox recover gets past, not a mismatch
// of the shards, which the relay records nowhere.
func TestCheckPublicationGivesTheCoverageError(t *testing.T) {
	conn := setupDB(t)
	ctx := t.Context()
	if _, err := shard.CreatePublications(ctx, conn, wire.DefaultTable, base(3)); err != nil {
		t.Fatal(err)
	}
	mustExec(t, conn, "DROP PUBLICATION walbox_s1of3")
	mustExec(t, conn, "ALTER PUBLICATION walbox_s2of3 DROP TABLE outbox")
	for _, tc := range []struct {
		k    int
		want error
	}{{1, inspect.ErrNoPublication}, {2, inspect.ErrNotCovered}} {
		pub := base(3).PublicationName(tc.k)
		err := shard.CheckPublication(ctx, conn, pub, wire.DefaultTable, tc.k, 3)
		c, cerr := inspect.ReadCoverage(ctx, conn, pub, []wire.Table{wire.DefaultTable})
		if cerr != nil {
			t.Fatal(cerr)
		}
		if !errors.Is(err, tc.want) || errors.Is(err, shard.ErrMismatch) || c.Err() == nil || err.Error() != c.Err().Error() {
			t.Errorf("CheckPublication of %s = %v; want the coverage check's %v", pub, err, c.Err())
		}
	}
	if err := shard.CheckPublication(ctx, conn, "walbox_s0of3", wire.DefaultTable, 0, 3); err != nil {
		t.Errorf("CheckPublication of the untouched walbox_s0of3: %v", err)
	}
}
