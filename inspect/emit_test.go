package inspect_test

import (
	"errors"
	"testing"

	"github.com/walbox/walbox/inspect"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/wire"
)

// ReadEmit reads the prefix walbox migrate wrote into walbox_emit, quotes included, and Err
// judges it against the relayed prefix as doctor and run do.
func TestReadEmitReadsThePrefixItWrites(t *testing.T) {
	_, _, conn := setup(t)
	if _, err := conn.Exec(t.Context(), "CREATE SCHEMA other"); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(t.Context(), conn, migrations.Config{Table: wire.Table{Schema: "other", Name: "outbox"},
		MessagePrefix: "it's"}); err != nil {
		t.Fatal(err)
	}
	// A backslash stays as it is in the literal migrate writes; format's %L would write E'a\\b'.
	if _, err := conn.Exec(t.Context(), "CREATE SCHEMA back"); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(t.Context(), conn, migrations.Config{Table: wire.Table{Schema: "back", Name: "outbox"},
		MessagePrefix: `app\events`}); err != nil {
		t.Fatal(err)
	}
	// An overload of the application's beside it: a wrapper that emits nothing itself.
	if _, err := conn.Exec(t.Context(), `CREATE FUNCTION back.walbox_emit(n int) RETURNS int
		LANGUAGE sql AS 'SELECT n'`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		schema, prefix, emits string
		want                  error
	}{
		{"public", "walbox", "walbox", nil},
		{"public", "billing", "walbox", inspect.ErrEmitPrefix},
		{"public", "", "walbox", nil},
		{"other", "it's", "it's", nil},
		{"other", "walbox", "it's", inspect.ErrEmitPrefix},
		{"back", `app\events`, `app\events`, nil},
		{"back", `app\\events`, `app\events`, inspect.ErrEmitPrefix},
	} {
		e, err := inspect.ReadEmit(t.Context(), conn, wire.Table{Schema: c.schema, Name: "outbox"}, c.prefix)
		if err != nil {
			t.Fatal(err)
		}
		if e.Emits != c.emits || !errors.Is(e.Err(), c.want) || (c.want == nil) != (e.Err() == nil) {
			t.Errorf("%s relayed %q: emits %q, err %v; want %q, %v", c.schema, c.prefix, e.Emits, e.Err(), c.emits, c.want)
		}
	}
}
