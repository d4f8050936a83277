package cli

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Each default of the setting table comes from a constant of the package that uses it: a row
// that writes its default as a literal writes it a second time. Only a switch may write "false",
// which is its absence.
func TestTableDefaultsComeFromConstants(t *testing.T) {
	for _, problem := range literalTableDefaults(t, "settingtable.go") {
		t.Error(problem)
	}
}

// No configuration of the product fills in a default with a literal (if c.Window == 0 {
// c.Window = 1024 }): it refers to the constant, which the setting table and the docs show too.
func TestDefaultsAreFilledInFromConstants(t *testing.T) {
	for _, file := range productFiles(t) {
		fset, f := parse1(t, file)
		for _, fn := range configMethods(f) {
			ast.Inspect(fn, func(n ast.Node) bool {
				if lhs, rhs, ok := defaulting(n); ok && literalExpr(rhs) {
					t.Errorf("%s: %s is set to the literal %s when empty; name it as a Default constant",
						fset.Position(n.Pos()), lhs, exprText(rhs))
				}
				return true
			})
		}
	}
}

// configMethods are the methods of f on a configuration: a type whose name ends in Config.
func configMethods(f *ast.File) []*ast.FuncDecl {
	var out []*ast.FuncDecl
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if ok && fn.Recv != nil && strings.HasSuffix(strings.TrimPrefix(exprText(fn.Recv.List[0].Type), "*"), "Config") {
			out = append(out, fn)
		}
	}
	return out
}

// No Default constant is written as the same literal in two packages: one refers to the other.
func TestDefaultConstantsAreWrittenOnce(t *testing.T) {
	seen := map[string]string{}
	for _, file := range productFiles(t) {
		fset, f := parse1(t, file)
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Default") || i >= len(vs.Values) || !literalExpr(vs.Values[i]) {
						continue
					}
					at, key := fset.Position(name.Pos()).String(), name.Name+" = "+exprText(vs.Values[i])
					if first, ok := seen[key]; ok {
						t.Errorf("%s: %s is written at %s too; refer to one of them", at, key, first)
					}
					seen[key] = at
				}
			}
		}
	}
}

// literalTableDefaults names the rows of the table in file whose def is a literal.
func literalTableDefaults(t *testing.T, file string) []string {
	t.Helper()
	fset, f := parse1(t, file)
	var problems []string
	ast.Inspect(f, func(n ast.Node) bool {
		row, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		fields := map[string]ast.Expr{}
		for _, e := range row.Elts {
			if kv, ok := e.(*ast.KeyValueExpr); ok {
				if k, ok := kv.Key.(*ast.Ident); ok {
					fields[k.Name] = kv.Value
				}
			}
		}
		def, ok := fields["def"]
		if !ok || !literalExpr(def) {
			return true
		}
		if exprText(fields["isBool"]) == "true" && exprText(def) == `"false"` {
			return true
		}
		problems = append(problems, fmt.Sprintf("%s: %s writes its default %s as a literal; refer to the constant of the package that uses it",
			fset.Position(def.Pos()), exprText(fields["flag"]), exprText(def)))
		return true
	})
	return problems
}

// defaulting matches `if x == zero { x = v }` and returns x and v.
func defaulting(n ast.Node) (string, ast.Expr, bool) {
	s, ok := n.(*ast.IfStmt)
	if !ok || s.Init != nil || s.Else != nil || len(s.Body.List) != 1 {
		return "", nil, false
	}
	cond, ok := s.Cond.(*ast.BinaryExpr)
	if !ok || (cond.Op != token.EQL && cond.Op != token.LEQ) || !slices.Contains([]string{`""`, "0", "nil"}, exprText(cond.Y)) {
		return "", nil, false
	}
	as, ok := s.Body.List[0].(*ast.AssignStmt)
	if !ok || len(as.Lhs) != 1 || len(as.Rhs) != 1 || exprText(as.Lhs[0]) != exprText(cond.X) {
		return "", nil, false
	}
	return exprText(cond.X), as.Rhs[0], true
}

// literalExpr reports whether e is a constant written out: literals, arithmetic on them and the
// time package's units (10 * time.Second), with no named constant of walbox in it.
func literalExpr(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.BasicLit:
		return true
	case *ast.ParenExpr:
		return literalExpr(e.X)
	case *ast.UnaryExpr:
		return literalExpr(e.X)
	case *ast.BinaryExpr:
		return literalExpr(e.X) && literalExpr(e.Y)
	case *ast.SelectorExpr:
		pkg, ok := e.X.(*ast.Ident)
		return ok && pkg.Name == "time"
	case *ast.CallExpr: // time.Duration(0)
		return len(e.Args) == 1 && literalExpr(e.Fun) && literalExpr(e.Args[0])
	}
	return false
}

func exprText(e ast.Expr) string {
	switch e := e.(type) {
	case nil:
		return ""
	case *ast.BasicLit:
		return e.Value
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprText(e.X) + "." + e.Sel.Name
	case *ast.StarExpr:
		return "*" + exprText(e.X)
	case *ast.BinaryExpr:
		return exprText(e.X) + " " + e.Op.String() + " " + exprText(e.Y)
	case *ast.CallExpr:
		args := make([]string, len(e.Args))
		for i, a := range e.Args {
			args[i] = exprText(a)
		}
		return exprText(e.Fun) + "(" + strings.Join(args, ", ") + ")"
	}
	return fmt.Sprintf("%T", e)
}

func parse1(t *testing.T, file string) (*token.FileSet, *ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fset, f
}

// productFiles are the Go files of the product module, tests and test helpers left out.
func productFiles(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..")
	skip := []string{"test", "examples", "otel", "deploy", "docs", "testdata", "internal/testenv", "publisher/publishertest"}
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && rel != "." || slices.Contains(skip, filepath.ToSlash(rel))) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 50 {
		t.Fatalf("found %d product files under %s; want the whole module", len(files), root)
	}
	return files
}
