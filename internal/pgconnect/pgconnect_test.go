package pgconnect_test

import (
	"testing"

	"github.com/walbox/walbox/internal/pgconnect"
)

func TestEveryConfigPinsTheSearchPath(t *testing.T) {
	for _, dsn := range []string{
		"postgres://u@localhost/db",
		"postgres://u@localhost/db?search_path=public",
		"host=localhost user=u dbname=db search_path=app options='-c search_path=app'",
	} {
		cfg, err := pgconnect.ParseConfig(dsn)
		if err != nil {
			t.Fatalf("ParseConfig(%q): %v", dsn, err)
		}
		if got := cfg.RuntimeParams["search_path"]; got != pgconnect.SearchPath {
			t.Errorf("ParseConfig(%q): search_path %q, want %q", dsn, got, pgconnect.SearchPath)
		}
		rcfg, err := pgconnect.ParseConnConfig(dsn)
		if err != nil {
			t.Fatalf("ParseConnConfig(%q): %v", dsn, err)
		}
		if got := rcfg.RuntimeParams["search_path"]; got != pgconnect.SearchPath {
			t.Errorf("ParseConnConfig(%q): search_path %q, want %q", dsn, got, pgconnect.SearchPath)
		}
	}
}
