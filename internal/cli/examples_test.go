package cli

import (
	"io"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/walbox/walbox/outbox"
)

var examples = filepath.Join("..", "..", "examples")

// The settings whose example value is not their default: they have none, or none that works.
var exampleValues = []string{"database-url", "amqp-url", "older-than"}

// examples/walbox.yaml holds every setting, each with its default unless it is one of
// exampleValues, and `walbox run` takes it: the loader, the settings and the relay's configuration.
func TestExampleConfigHasEverySetting(t *testing.T) {
	path := filepath.Join(examples, "walbox.yaml")
	cf, err := loadConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(maps.Keys(cf.values))
	if want := fileKeys(); !slices.Equal(got, want) {
		t.Errorf("settings in %s:\n  %v\nwant every setting of settingTable:\n  %v", path, got, want)
	}
	for _, g := range settingTable {
		for _, sp := range g.specs {
			if v, ok := cf.values[sp.flag]; ok && v != sp.def && !slices.Contains(exampleValues, sp.flag) {
				t.Errorf("%s: %s: %q, want the default %q", path, sp.flag, v, sp.def)
			}
		}
	}

	t.Setenv("WALBOX_CONFIG", path)
	c := newCommon("run")
	if err := c.parse(newFlagSet("run", "run", io.Discard), nil); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := relayConfig(c, io.Discard)
	if err != nil {
		t.Fatalf("run with %s: %v", path, err)
	}
	if cfg.Brokers == nil || cfg.Lanes != 1 {
		t.Fatalf("run with %s: brokers %v, lanes %d; want brokers and 1 lane", path, cfg.Brokers, cfg.Lanes)
	}
}

// examples/legacy-table.yaml maps the table of TestMappedLegacyTable, which relays through it.
func TestExampleLegacyTable(t *testing.T) {
	path := filepath.Join(examples, "legacy-table.yaml")
	cf, err := loadConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []outbox.Mapping{
		{Table: outbox.Table{Schema: "public", Name: "outbox"}},
		{Table: outbox.Table{Schema: "public", Name: "legacy_events"}, ID: "event_id", EventType: "kind",
			Payload: "body", AggregateType: "entity", AggregateID: "entity_id", Headers: "meta",
			CreatedAt: "occurred_at", RoutingKey: "{entity}.{kind}", MessageID: outbox.IDSource("column")},
	}
	if !slices.Equal(cf.tables, want) {
		t.Fatalf("tables = %+v\nwant %+v", cf.tables, want)
	}
	if len(cf.values) != 0 {
		t.Errorf("%s sets %v; want only tables, so that the test relaying through it keeps its own settings", path, cf.values)
	}
}
