package pgconnect_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
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

// Every connection of the product goes through this package: no file of it calls pgx or pgconn
// to connect, or parses a configuration it then connects with, itself.
func TestNoConnectionBypassesThePin(t *testing.T) {
	banned := regexp.MustCompile(`\b(pgx\.Connect|pgxpool\.New\w*|pgxpool\.ParseConfig|pgconn\.Connect)\(`)
	parse := regexp.MustCompile(`\b(pgx|pgconn)\.ParseConfig\(`)
	connect := regexp.MustCompile(`\b(pgx|pgconn)\.ConnectConfig\(`)
	walkProduct(t, func(rel, path string) error {
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
			strings.HasPrefix(rel, filepath.Join("internal", "pgconnect")+string(filepath.Separator)) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(data)
		if m := banned.FindString(src); m != "" {
			t.Errorf("%s calls %s: connect through pgconnect, which pins search_path", rel, m)
		}
		if parse.MatchString(src) && connect.MatchString(src) {
			t.Errorf("%s parses a connection string and connects: parse it with pgconnect, which pins search_path", rel)
		}
		return nil
	})
}
