package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/testenv"
)

// An existing outbox table with other column names and types, beside the default one in the same
// publication, mapped by the config file.
func TestMappedLegacyTable(t *testing.T) {
	w := newWorld(t, testenv.SharedPostgres(t), testenv.SharedRabbit(t))
	ctx := context.Background()
	for _, sql := range []string{
		`CREATE TABLE legacy_events (event_id bigserial PRIMARY KEY, kind text NOT NULL, body jsonb NOT NULL,
			entity text, entity_id bigint, meta jsonb, occurred_at timestamptz DEFAULT now())`,
		`ALTER PUBLICATION walbox ADD TABLE legacy_events`,
	} {
		if _, err := w.conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	// The example config maps this table: the relay and doctor read that very file.
	conf, err := filepath.Abs(filepath.Join("..", "..", "examples", "legacy-table.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	yaml, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	x := w.insertTx(w.conn, 2, "order.created")
	var legacyID string
	if err := w.conn.QueryRow(ctx, `INSERT INTO legacy_events (kind, body, entity, entity_id, meta)
		VALUES ('shipped', '{"parcel": 7}', 'parcel', 7, '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}')
		RETURNING event_id::text`).Scan(&legacyID); err != nil {
		t.Fatal(err)
	}
	w.startRelay("WALBOX_CONFIG=" + conf)
	got := w.drain([]txn{x}, nil, time.Minute)
	got = append(got, w.drainQuiet(2*time.Second)...)
	var found bool
	for _, d := range got {
		if d.MessageId != legacyID {
			continue
		}
		found = true
		if d.RoutingKey != "parcel.shipped" || d.Type != "shipped" || string(d.Body) != `{"parcel": 7}` ||
			d.Headers["aggregate_id"] != "7" || d.Headers["traceparent"] == nil {
			t.Errorf("legacy row delivered as key %q type %q body %s headers %v", d.RoutingKey, d.Type, d.Body, d.Headers)
		}
	}
	if !found {
		t.Fatalf("the legacy row %s never arrived (got %d messages)", legacyID, len(got))
	}

	// doctor judges what run needs, table by table, from the same config file.
	r := w.doctor([]string{"WALBOX_CONFIG=" + conf})
	var tables int
	for _, c := range r.Checks {
		if c.Name == "outbox_table" {
			tables++
			if c.Status != "pass" {
				t.Errorf("doctor with the config file: outbox_table %s %q, want pass", c.Status, c.Message)
			}
		}
	}
	if r.code != 0 || tables != 2 || !strings.Contains(r.check(t, "publication").Message, "public.legacy_events") {
		t.Errorf("doctor with the config file: exit %d, %d outbox_table checks, want 0 and 2:\n%s", r.code, tables, r.out)
	}

	// A mapping naming a column the table lacks stops walbox with an error naming it.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(yaml), "payload: body", "payload: data", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := w.walbox([]string{"WALBOX_CONFIG=" + bad, "WALBOX_SLOT=" + w.slot + "_x"}, "run")
	if code != 1 || !strings.Contains(out, `"data"`) {
		t.Fatalf("exit %d, output %q: want exit 1 naming the column data", code, out)
	}
	r = w.doctor([]string{"WALBOX_CONFIG=" + bad})
	var named bool
	for _, c := range r.Checks {
		named = named || (c.Name == "outbox_table" && c.Status == "fail" && strings.Contains(c.Message, `"data"`) &&
			strings.Contains(c.Fix, "config file"))
	}
	if r.code != 1 || !named {
		t.Errorf("doctor with the bad config file: exit %d, want 1 and a failed outbox_table check naming the column data:\n%s", r.code, r.out)
	}
}
