package main

import (
	"bytes"
	"context"
	"io"
	"maps"
	"path/filepath"
	"regexp"
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
	want := slices.Sorted(slices.Values(knownSettings))
	if !slices.Equal(got, want) {
		t.Errorf("settings in %s:\n  %v\nwant every setting:\n  %v", path, got, want)
	}
	for name, def := range settingDefaults(t) {
		if v, ok := cf.values[name]; ok && v != def && !slices.Contains(exampleValues, name) {
			t.Errorf("%s: %s: %q, want the default %q", path, name, v, def)
		}
	}

	t.Setenv("WALBOX_CONFIG", path)
	r := newRunSettings()
	if err := r.c.parse(newFlagSet("run", "run", io.Discard), nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := relayConfig(r.c, r.b, r.status, r.shutdown, r.createSlot, false); err != nil {
		t.Fatalf("run with %s: %v", path, err)
	}
	if _, err := r.b.endpoints(r.c, "walbox"); err != nil {
		t.Fatalf("run with %s: brokers: %v", path, err)
	}
	if n, err := r.lanes.int(); err != nil || n != 1 {
		t.Fatalf("run with %s: lanes %d, %v; want 1", path, n, err)
	}
}

// settingDefaults reads every command's settings and their defaults from its --help.
func settingDefaults(t *testing.T) map[string]string {
	t.Helper()
	flagHelp := regexp.MustCompile(`(?m)^  -([a-z-]+)[^\n]*\n[ \t]+([^\n]*)`)
	def := regexp.MustCompile(`\(default "([^"]*)"\)$`)
	defaults := map[string]string{}
	for _, c := range commands {
		var out bytes.Buffer
		if code := mainWithExit(context.Background(), []string{c.name, "--help"}, &out, &out); code != 0 {
			t.Fatalf("walbox %s --help exited %d", c.name, code)
		}
		for _, m := range flagHelp.FindAllStringSubmatch(out.String(), -1) {
			if d := def.FindStringSubmatch(m[2]); d != nil {
				defaults[m[1]] = d[1]
			} else if _, ok := defaults[m[1]]; !ok {
				defaults[m[1]] = ""
			}
		}
	}
	if len(defaults) < len(knownSettings) {
		t.Fatalf("read %d settings from --help, want at least %d", len(defaults), len(knownSettings))
	}
	return defaults
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
