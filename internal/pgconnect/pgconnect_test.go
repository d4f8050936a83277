package pgconnect_test

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walbox/walbox/internal/pgconnect"
	"github.com/walbox/walbox/internal/testenv"
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

// A connection attempt is bounded: by DefaultConnectTimeout, or by the URL's connect_timeout.
// A server that accepts and never answers then fails the attempt instead of hanging it.
func TestEveryConnectionAttemptIsBounded(t *testing.T) {
	for dsn, want := range map[string]time.Duration{
		"postgres://u@localhost/db":                   pgconnect.DefaultConnectTimeout,
		"postgres://u@localhost/db?connect_timeout=5": 5 * time.Second,
		"host=localhost user=u dbname=db":             pgconnect.DefaultConnectTimeout,
	} {
		cfg, err := pgconnect.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		rcfg, err := pgconnect.ParseConnConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.ConnectTimeout != want || rcfg.ConnectTimeout != want {
			t.Errorf("%q: connect timeout %v and %v, want %v", dsn, cfg.ConnectTimeout, rcfg.ConnectTimeout, want)
		}
	}

	// A listener that accepts and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err = pgconnect.Connect(ctx, "postgres://u@"+ln.Addr().String()+"/db?sslmode=disable&connect_timeout=1")
	if err == nil {
		t.Fatal("connected to a server that never answers")
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the attempt took %v, want it ended by connect_timeout (1 s)", took)
	}
}

// A database or role whose default isolation is serializable does not reach walbox's transactions:
// each connection runs them in read committed. Schedule batches failed at commit there, after their
// confirms, and were sent again.
func TestEveryConnectionDefaultsToReadCommitted(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	pg.Exec(t, db, `DO $$ BEGIN EXECUTE pg_catalog.format('ALTER DATABASE %I SET default_transaction_isolation = serializable',
		pg_catalog.current_database()); END $$`)
	ctx := context.Background()
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("options", "-c default_transaction_isolation=serializable")
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // libpq's URLs read + as itself
	for _, dsn := range []string{db, u.String()} {
		conn, err := pgconnect.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		var level string
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, "SELECT pg_catalog.current_setting('transaction_isolation')").Scan(&level)
		})
		_ = conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if level != pgconnect.Isolation {
			t.Errorf("%s: a transaction of a database that defaults to serializable runs in %s, want %s", dsn, level, pgconnect.Isolation)
		}
	}
}
