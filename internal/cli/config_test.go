package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/walbox/walbox/outbox"
	"github.com/walbox/walbox/shard"
)

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSettingPrecedence(t *testing.T) {
	conf := writeFile(t, "walbox.yaml", "slot: from_file\npublication: from_file\ntable: app.from_file\nexchange: from_file\n")
	pubFile := writeFile(t, "pub", "from_env_file\n")
	t.Setenv("WALBOX_CONFIG", conf)
	t.Setenv("WALBOX_PUBLICATION", "")
	t.Setenv("WALBOX_PUBLICATION_FILE", pubFile)
	t.Setenv("WALBOX_TABLE", "app.from_env")
	t.Setenv("WALBOX_TABLE_FILE", filepath.Join(t.TempDir(), "missing")) // not read: the variable wins
	t.Setenv("WALBOX_SLOT", "from_env")
	t.Setenv("WALBOX_DATABASE_URL", "postgres://walbox@db/app")

	c := newCommon("status")
	fs := newFlagSet("test", "test", &bytes.Buffer{})
	c.s.register(fs)
	if err := parse(fs, []string{"--slot", "from_flag"}); err != nil {
		t.Fatal(err)
	}
	if err := c.s.resolve(); err != nil {
		t.Fatal(err)
	}
	if err := c.s.bind(c.v); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, got, want string }{
		{"flag beats environment", c.v.relay.Slot, "from_flag"},
		{"environment beats NAME_FILE and the config file", c.v.relay.Table.String(), "app.from_env"},
		{"NAME_FILE beats config file", c.v.relay.Publication, "from_env_file"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

func TestConfigFileValueAndDefault(t *testing.T) {
	conf := writeFile(t, "walbox.yaml", "slot: from_file\n")
	t.Setenv("WALBOX_CONFIG", conf)
	t.Setenv("WALBOX_DATABASE_URL", "postgres://walbox@db/app")
	c := newCommon("status")
	resolveSettings(t, c)
	if r := c.v.relay; r.Slot != "from_file" || r.Publication != "walbox" {
		t.Fatalf("slot %q publication %q, want from_file and the default walbox", r.Slot, r.Publication)
	}
}

func TestConfigFileErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"unknown setting", "slott: x\n", `unknown setting "slott"; did you mean "slot"?`},
		{"not a map", "- a\n- b\n", "config file"},
		{"list for a value", "slot: [a, b]\n", "want a single value"},
		{"unknown table field", "tables:\n  - table: public.events\n    colour: red\n", `unknown key "colour" in tables[0]`},
		{"mistyped table field", "tables:\n  - table: public.events\n  - table: public.more\n    evnet-type: kind\n",
			`unknown key "evnet-type" in tables[1] (line 4); did you mean "event-type"?`},
		{"bad message id source", "tables:\n  - table: public.events\n    message-id: random\n", "message id source"},
		{"no id without position ids", "tables:\n  - table: public.events\n    id: \"-\"\n", "no id column"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadConfigFile(writeFile(t, "c.yaml", tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("loadConfigFile = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestConfigFileTables(t *testing.T) {
	cf, err := loadConfigFile(writeFile(t, "c.yaml", `
tables:
  - table: app.events
    id: event_id
    event-type: kind
    payload: body
    routing-key: "{entity}.{kind}"
    deliver-at: remind_at
  - table: orders_outbox
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []outbox.Mapping{
		{Table: outbox.Table{Schema: "app", Name: "events"}, ID: "event_id", EventType: "kind", Payload: "body",
			RoutingKey: "{entity}.{kind}", DeliverAt: "remind_at"},
		{Table: outbox.Table{Schema: "public", Name: "orders_outbox"}},
	}
	if !slices.Equal(cf.tables, want) {
		t.Fatalf("tables = %+v, want %+v", cf.tables, want)
	}
}

// A switch takes --name, --name=false and, from the environment, any form strconv.ParseBool reads.
func TestBoolForms(t *testing.T) {
	tests := []struct {
		args []string
		env  string
		want bool
	}{
		{nil, "", true}, // the default of --create-slot
		{[]string{"--create-slot=false"}, "", false},
		{[]string{"--create-slot"}, "0", true},
		{nil, "0", false},
		{nil, "false", false},
		{nil, "1", true},
		{nil, "TRUE", true},
	}
	for _, tt := range tests {
		t.Setenv("WALBOX_CREATE_SLOT", tt.env)
		s := newSettings("run")
		fs := newFlagSet("run", "test", &bytes.Buffer{})
		s.register(fs)
		if err := parse(fs, tt.args); err != nil {
			t.Fatal(err)
		}
		if err := s.resolve(); err != nil {
			t.Fatal(err)
		}
		var got bool
		err := decode(&got, s.get("create-slot").value)
		if err != nil || got != tt.want {
			t.Errorf("args %v, WALBOX_CREATE_SLOT=%q: got %v (%v), want %v", tt.args, tt.env, got, err, tt.want)
		}
	}
}

// A command's final error keeps a bad setting a bad setting (exit 2), with no password in it: a
// mismatched --shards found by migrate's or reshard's database work is the user's setting.
func TestFailKeepsABadSettingAndHidesThePassword(t *testing.T) {
	c := newCommon("reshard")
	c.s.get("database-url").value = "postgres://walbox:s3cret-pw@db/walbox"
	shards := c.s.get("shards")
	err := c.fail(mismatch(shards, fmt.Errorf("postgres://walbox:s3cret-pw@db/walbox: %w", shard.ErrMismatch)))
	var ce configError
	if !errors.As(err, &ce) {
		t.Fatalf("fail(a shard mismatch) = %T %v, want a configError (exit 2)", err, err)
	}
	if !strings.Contains(err.Error(), "--shards") || strings.Contains(err.Error(), "s3cret-pw") {
		t.Fatalf("fail(a shard mismatch) = %q: want it to name --shards and hide the password", err)
	}
	if err := c.fail(errors.New("broker gone")); errors.As(err, &ce) {
		t.Fatalf("fail(another error) = a configError %q, want exit 1", err)
	}
}
