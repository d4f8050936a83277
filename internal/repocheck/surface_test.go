package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/walbox/walbox"

// TestLibraryNamesAreUsedOrDocumented keeps the libraries' surface small. A library is any package
// of the root module outside cmd/ and internal/, and otel/tracing. Each of its exported names must
// be used outside the package (in any of the modules, tests included), or be shown to users: in the
// package's doc.go, an Example, README.md or docs/. A name that such a name's signature or doc
// comment leads to counts too, and so does each constant of a group that has one. A method
// counts when code that imports its package selects it, when an interface declared elsewhere
// has it, or when the docs name it. Doc comments alone count for nothing.
func TestLibraryNamesAreUsedOrDocumented(t *testing.T) {
	root := repoRoot(t)
	files := parseTree(t, root)
	docs := userDocs(t, root)
	for _, lib := range libraries(files) {
		for _, n := range deadNames(files, docs, lib) {
			t.Errorf("%s.%s: not used outside its package, nor named in its doc.go, an Example, the README or docs/", lib, n)
		}
	}
}

// stdMethods implement the standard library's interfaces (error, fmt.Stringer, errors.Is).
var stdMethods = map[string]bool{"Error": true, "Unwrap": true, "String": true, "Is": true, "As": true}

// goFile is one parsed file of the repository, with the directory (relative to the root) that
// is its package.
type goFile struct {
	ast  *ast.File
	dir  string
	name string
	test bool
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// parseTree parses every Go file of the modules (root, test/, examples/, otel/), testdata aside.
func parseTree(t *testing.T, root string) []goFile {
	t.Helper()
	var files []goFile
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		files = append(files, goFile{ast: f, dir: filepath.ToSlash(rel), name: d.Name(), test: strings.HasSuffix(path, "_test.go")})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// libraries returns the root module's packages that other programs may import: not main, not
// under cmd/ or internal/, not in the test or examples modules.
func libraries(files []goFile) []string {
	set := map[string]bool{}
	for _, f := range files {
		top, _, _ := strings.Cut(f.dir, "/")
		if f.test || f.ast.Name.Name == "main" || slices.Contains([]string{".", "cmd", "internal", "test", "examples"}, top) {
			continue
		}
		set[f.dir] = true
	}
	libs := make([]string, 0, len(set))
	for lib := range set {
		libs = append(libs, lib)
	}
	sort.Strings(libs)
	return libs
}

// deadNames returns the exported names of the package in dir lib that nothing uses or shows.
func deadNames(files []goFile, docs, lib string) []string {
	decls := map[string]decl{} // by exported name, Type.Method for a method
	examples := map[string]bool{}
	var pkgDoc string
	for _, f := range files {
		if f.dir != lib {
			continue
		}
		if f.test {
			markExamples(f, examples)
			continue
		}
		for _, d := range f.ast.Decls {
			for name, d := range declared(d) {
				decls[name] = d
			}
		}
		if f.name == "doc.go" {
			pkgDoc += commentText(f.ast)
		}
	}
	selected, ifaceMethods := usesOutside(files, lib)
	qualified := filepath.Base(lib) + "."
	live := map[string]bool{}
	for name := range decls {
		_, method, isMethod := strings.Cut(name, ".")
		switch {
		case !isMethod && (selected[name] || examples[name] || named(pkgDoc, name) || named(docs, qualified+name)):
			live[name] = true
		case isMethod && (stdMethods[method] || ifaceMethods[method] || selected["."+method] || examples["."+method] ||
			named(pkgDoc, name) || named(docs, name) || named(docs, "."+method+"(")):
			live[name] = true
		}
	}
	reach(decls, live)
	var dead []string
	for name := range decls {
		typ, _, isMethod := strings.Cut(name, ".")
		if _, ok := decls[typ]; !live[name] || (isMethod && ok && !live[typ]) {
			dead = append(dead, name)
		}
	}
	sort.Strings(dead)
	return dead
}

// markExamples marks the names an Example function selects (.Method for a method), and the name
// it is an example of.
func markExamples(f goFile, examples map[string]bool) {
	for _, d := range f.ast.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || !strings.HasPrefix(fd.Name.Name, "Example") {
			continue
		}
		ast.Inspect(fd, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				examples[sel.Sel.Name] = true
				examples["."+sel.Sel.Name] = true
			}
			return true
		})
		of := strings.TrimPrefix(strings.TrimPrefix(fd.Name.Name, "Example"), "_")
		examples[strings.Replace(of, "_", ".", 1)] = true
	}
}

// usesOutside returns what code outside lib selects from it: Name for lib.Name anywhere, and
// .Method for a method selected in a package that imports lib. It also returns the method names
// of the interfaces declared outside lib, which lib's types may implement.
func usesOutside(files []goFile, lib string) (selected, ifaceMethods map[string]bool) {
	selected, ifaceMethods = map[string]bool{}, map[string]bool{}
	importers := map[string]bool{}
	for _, f := range files {
		if importName(f.ast, lib) != "" {
			importers[f.dir] = true
		}
	}
	for _, alias := range aliasers(files, lib) { // outbox.Mapping is wire.Mapping
		for _, f := range files {
			if importName(f.ast, alias) != "" {
				importers[f.dir] = true
			}
		}
	}
	for _, f := range files {
		if f.dir == lib {
			continue
		}
		local := importName(f.ast, lib)
		ast.Inspect(f.ast, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && local != "" && id.Name == local {
					selected[n.Sel.Name] = true
				} else if importers[f.dir] {
					selected["."+n.Sel.Name] = true
				}
			case *ast.InterfaceType:
				for _, m := range n.Methods.List {
					for _, id := range m.Names {
						ifaceMethods[id.Name] = true
					}
				}
			}
			return true
		})
	}
	return selected, ifaceMethods
}

// aliasers returns the libraries that name a type of lib by an alias (type T = lib.T).
func aliasers(files []goFile, lib string) []string {
	var dirs []string
	for _, f := range files {
		local := importName(f.ast, lib)
		if local == "" || f.test {
			continue
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok && ts.Assign.IsValid() {
				if sel, ok := ts.Type.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == local {
						dirs = append(dirs, f.dir)
					}
				}
			}
			return true
		})
	}
	return dirs
}

// importName returns the name under which file f imports lib, or "".
func importName(f *ast.File, lib string) string {
	for _, im := range f.Imports {
		if path, _ := strconv.Unquote(im.Path.Value); path == module+"/"+lib {
			if im.Name != nil {
				return im.Name.Name
			}
			return filepath.Base(lib)
		}
	}
	return ""
}

// decl is what a user of an exported name meets: its type expression and its doc comments.
type decl struct {
	typ ast.Node
	doc string
}

// declared returns the exported names a declaration introduces (Type.Method for a method).
func declared(d ast.Decl) map[string]decl {
	names := map[string]decl{}
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			break
		}
		if d.Recv == nil {
			names[d.Name.Name] = decl{d.Type, d.Doc.Text()}
			break
		}
		recv := d.Recv.List[0].Type
		if s, ok := recv.(*ast.StarExpr); ok {
			recv = s.X
		}
		switch g := recv.(type) { // a generic type's receiver, Type[T]
		case *ast.IndexExpr:
			recv = g.X
		case *ast.IndexListExpr:
			recv = g.X
		}
		if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
			names[id.Name+"."+d.Name.Name] = decl{d.Type, d.Doc.Text()}
		}
	case *ast.GenDecl:
		var group string // a group of constants is read as one: each leads to the others
		if d.Tok == token.CONST && d.Lparen.IsValid() {
			for _, s := range d.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					group += " " + n.Name
				}
			}
		}
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if s.Name.IsExported() {
					names[s.Name.Name] = decl{s.Type, d.Doc.Text() + s.Doc.Text() + fieldDocs(s.Type)}
				}
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() {
						names[n.Name] = decl{s.Type, d.Doc.Text() + s.Doc.Text() + s.Comment.Text() + group}
					}
				}
			}
		}
	}
	return names
}

// fieldDocs returns the doc comments of a struct's or an interface's exported members.
func fieldDocs(typ ast.Expr) string {
	var list *ast.FieldList
	switch t := typ.(type) {
	case *ast.StructType:
		list = t.Fields
	case *ast.InterfaceType:
		list = t.Methods
	default:
		return ""
	}
	var b strings.Builder
	for _, f := range list.List {
		if len(f.Names) > 0 && f.Names[0].IsExported() {
			b.WriteString(f.Doc.Text() + f.Comment.Text())
		}
	}
	return b.String()
}

// word is what a doc comment names: Name or Type.Method.
var word = regexp.MustCompile(`[A-Z][A-Za-z0-9_]*(\.[A-Z][A-Za-z0-9_]*)?`)

// reach makes live every name of the package that a live name leads a user to: a type its
// signature or fields use, a name its doc comment gives (a default, a sentinel, a method of the
// same type).
func reach(decls map[string]decl, live map[string]bool) {
	for changed := true; changed; {
		changed = false
		mark := func(name string) {
			if _, ok := decls[name]; ok && !live[name] {
				live[name] = true
				changed = true
			}
		}
		for name, d := range decls {
			if !live[name] {
				continue
			}
			if d.typ != nil {
				ast.Inspect(d.typ, func(n ast.Node) bool {
					if id, ok := n.(*ast.Ident); ok {
						mark(id.Name)
					}
					return true
				})
			}
			typ, _, _ := strings.Cut(name, ".")
			for _, w := range word.FindAllString(d.doc, -1) {
				mark(w)
				mark(typ + "." + w)
			}
		}
	}
}

func commentText(f *ast.File) string {
	var b strings.Builder
	for _, c := range f.Comments {
		b.WriteString(c.Text())
	}
	return b.String()
}

// userDocs returns the text of README.md and docs/*.md.
func userDocs(t *testing.T, root string) string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range append(paths, filepath.Join(root, "README.md")) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}

// named reports whether text names w as a whole word.
func named(text, w string) bool {
	return regexp.MustCompile(`(^|[^A-Za-z0-9_])` + regexp.QuoteMeta(w) + `($|[^A-Za-z0-9_])`).MatchString(text)
}
