package pgconnect_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// sqlCallRE finds a name written right before "(", as walbox's SQL writes a call, with the
// schema before it if any: a qualified call has "pg_catalog." there.
var sqlCallRE = regexp.MustCompile(`(?i)(\b[a-z_][a-z0-9_]*\.)?\b([a-z_][a-z0-9_]*)\(`)

// notSent are texts that name a built-in but that walbox does not send: a metric's help, advice
// for a person to run, a label, and the text walbox looks for in walbox_emit's body.
var notSent = []string{
	"pg_current_wal_lsn() - restart_lsn",
	"; SELECT pg_reload_conf()",
	"nothing uses it: SELECT pg_drop_replication_slot(",
	"'pg_logical_emit_message(%s)'",
	"pg_logical_emit_message(true, '",
}

// sqlSyntax are pg_catalog names the grammar itself turns to pg_catalog, or that name a type with
// a modifier: EXTRACT(x FROM y), POSITION(a IN b), TRIM(...), numeric(10, 2) and the like.
var sqlSyntax = map[string]bool{
	"extract": true, "position": true, "trim": true,
	"numeric": true, "varchar": true, "bpchar": true, "char": true, "bit": true, "varbit": true,
	"timestamp": true, "timestamptz": true, "time": true, "timetz": true, "interval": true,
}

// Every call of a pg_catalog function in walbox's SQL is qualified: the outbox and consumer
// libraries run on the application's connection, whose search_path walbox does not pin, and a
// role that may CREATE in a schema on a path may plant an overload. pg_proc on the server names
// the built-ins; the SQL is every string literal of the product's Go files and its migrations.
func TestEveryBuiltinCallIsQualified(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	conn := pg.Conn(t, pg.URL())
	builtin := map[string]bool{}
	rows, err := conn.Query(context.Background(), `SELECT DISTINCT proname::pg_catalog.text FROM pg_catalog.pg_proc
		WHERE pronamespace = 'pg_catalog'::pg_catalog.regnamespace`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		builtin[name] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	found := 0
	check := func(where, sql string) {
		for _, m := range sqlCallRE.FindAllStringSubmatch(sql, -1) {
			name := strings.ToLower(m[2])
			if !builtin[name] || sqlSyntax[name] {
				continue
			}
			found++
			if m[1] == "" {
				t.Errorf("%s: %s( is not qualified: write pg_catalog.%s(", where, m[2], m[2])
			}
		}
	}
	for path, src := range productSQL(t) {
		check(path, src)
	}
	if found < 50 {
		t.Errorf("found %d built-in calls, want at least 50: is the pattern right?", found)
	}
}

// productSQL returns the string literals of each of the product's Go files and the text of each
// migration, by path.
func productSQL(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	walkProduct(t, func(rel, path string) error {
		switch {
		case strings.HasSuffix(path, ".sql"):
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			out[rel] = string(data)
		case strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go"):
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				return err
			}
			var lits []string
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						for _, text := range notSent {
							s = strings.ReplaceAll(s, text, "")
						}
						lits = append(lits, s)
					}
				}
				return true
			})
			out[rel] = strings.Join(lits, "\n")
		}
		return nil
	})
	return out
}

// walkProduct calls visit with each file of the product, its path relative to the repository
// root first. Tests, the harness, the examples, the deployment files and the docs are not the
// product, but a file of them may lie inside it: visit decides.
func walkProduct(t *testing.T, visit func(rel, path string) error) {
	t.Helper()
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if !d.IsDir() {
			return visit(rel, path)
		}
		switch {
		case rel != "." && strings.HasPrefix(d.Name(), "."), rel == "test", rel == "examples", rel == "deploy",
			rel == "docs", d.Name() == "testdata", rel == filepath.Join("internal", "testenv"):
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
