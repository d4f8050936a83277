package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// libraries are the packages that other programs import (the producer, the consumer, their
// vocabulary) and slots: each exported name in them is used by walbox or documented for users.
var libraries = []string{"wire", "outbox", "consumer", "slots"}

const module = "github.com/walbox/walbox"

// TestLibraryNamesAreUsedOrDocumented keeps the libraries' surface small: an exported name is
// selected by the walbox binary's own code or an example program, named in README.md, docs/ or an
// Example, or reached from another exported name's signature or doc comment.
func TestLibraryNamesAreUsedOrDocumented(t *testing.T) {
	root := repoRoot(t)
	used := namesUsedByWalbox(t, root)
	docs := userDocs(t, root)
	for _, lib := range libraries {
		names, examples := exportedNames(t, filepath.Join(root, lib))
		refs := surfaceRefs(t, filepath.Join(root, lib))
		for _, n := range names {
			_, method, _ := strings.Cut(n, ".")
			if stdMethods[method] || used[lib+"."+n] || examples[n] || refs[n] || documented(docs, lib, n) {
				continue
			}
			t.Errorf("%s.%s: neither used by walbox nor named in the docs, README or an example", lib, n)
		}
	}
}

// stdMethods implement the standard library's interfaces (error, fmt.Stringer, errors.Is).
var stdMethods = map[string]bool{"Error": true, "Unwrap": true, "String": true, "Is": true, "As": true}

// surfaceRefs returns the names that the package's exported declarations refer to, in their
// signatures, fields or doc comments: a name reached from the rest of the surface.
func surfaceRefs(t *testing.T, dir string) map[string]bool {
	t.Helper()
	refs := map[string]bool{}
	word := regexp.MustCompile(`[A-Z][A-Za-z0-9_]*(\.[A-Z][A-Za-z0-9_]*)?`)
	mark := func(self string, node ast.Node, doc *ast.CommentGroup) {
		if node != nil {
			ast.Inspect(node, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok && id.Name != self {
					refs[id.Name] = true
				}
				return true
			})
		}
		for _, w := range word.FindAllString(doc.Text(), -1) {
			if w != self {
				refs[w] = true
			}
		}
	}
	for _, f := range parseDir(t, dir, false) {
		for _, d := range f.ast.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() {
					mark(d.Name.Name, d.Type, d.Doc)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch sp := spec.(type) {
					case *ast.TypeSpec:
						if sp.Name.IsExported() {
							mark(sp.Name.Name, sp.Type, d.Doc)
							mark(sp.Name.Name, nil, sp.Doc)
							markFields(sp.Type, mark)
						}
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							if n.IsExported() {
								mark(n.Name, sp.Type, d.Doc)
								mark(n.Name, nil, sp.Doc)
								mark(n.Name, nil, sp.Comment)
							}
						}
					}
				}
			}
		}
	}
	return refs
}

// markFields marks what the doc comments of a struct's exported fields name.
func markFields(typ ast.Expr, mark func(string, ast.Node, *ast.CommentGroup)) {
	st, ok := typ.(*ast.StructType)
	if !ok {
		return
	}
	for _, f := range st.Fields.List {
		if len(f.Names) > 0 && f.Names[0].IsExported() {
			mark("", nil, f.Doc)
			mark("", nil, f.Comment)
		}
	}
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

// exportedNames returns the package's exported top-level names, with methods as Type.Method,
// and the names its Example functions use.
func exportedNames(t *testing.T, dir string) (names []string, examples map[string]bool) {
	t.Helper()
	examples = map[string]bool{}
	for _, f := range parseDir(t, dir, true) {
		for _, d := range f.ast.Decls {
			if f.test {
				if fd, ok := d.(*ast.FuncDecl); ok && strings.HasPrefix(fd.Name.Name, "Example") {
					ast.Inspect(fd, func(n ast.Node) bool {
						if id, ok := n.(*ast.Ident); ok {
							examples[id.Name] = true
						}
						return true
					})
					examples[strings.TrimPrefix(strings.TrimPrefix(fd.Name.Name, "Example"), "_")] = true
				}
				continue
			}
			names = append(names, declNames(d)...)
		}
	}
	sort.Strings(names)
	return names, examples
}

func declNames(d ast.Decl) []string {
	var names []string
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return nil
		}
		if d.Recv == nil {
			return []string{d.Name.Name}
		}
		recv := d.Recv.List[0].Type
		if s, ok := recv.(*ast.StarExpr); ok {
			recv = s.X
		}
		if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
			return []string{id.Name + "." + d.Name.Name}
		}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if s.Name.IsExported() {
					names = append(names, s.Name.Name)
				}
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	return names
}

type goFile struct {
	ast  *ast.File
	test bool
}

func parseDir(t *testing.T, dir string, tests bool) []goFile {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []goFile
	for _, e := range entries {
		name := e.Name()
		test := strings.HasSuffix(name, "_test.go")
		if e.IsDir() || !strings.HasSuffix(name, ".go") || (test && !tests) {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, goFile{ast: f, test: test})
	}
	return files
}

// namesUsedByWalbox returns lib.Name for every name of a library that the walbox binary's own
// code (cmd/walbox and the packages it imports, tests aside) selects from another package, and
// lib.Type.Method for every method selected anywhere in that code.
func namesUsedByWalbox(t *testing.T, root string) map[string]bool {
	t.Helper()
	used := map[string]bool{}
	methods := map[string]bool{}
	seen := map[string]bool{}
	queue := append([]string{"cmd/walbox"}, examplePrograms(root)...)
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		if seen[pkg] {
			continue
		}
		seen[pkg] = true
		for _, f := range parseDir(t, filepath.Join(root, pkg), false) {
			imports := map[string]string{}
			for _, im := range f.ast.Imports {
				path, _ := strconv.Unquote(im.Path.Value)
				rel, ok := strings.CutPrefix(path, module+"/")
				if !ok {
					continue
				}
				queue = append(queue, rel)
				name := filepath.Base(rel)
				if im.Name != nil {
					name = im.Name.Name
				}
				imports[name] = rel
			}
			ast.Inspect(f.ast, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				methods[sel.Sel.Name] = true
				if id, ok := sel.X.(*ast.Ident); ok && imports[id.Name] != "" {
					used[imports[id.Name]+"."+sel.Sel.Name] = true
				}
				return true
			})
		}
	}
	for _, lib := range libraries {
		names, _ := exportedNames(t, filepath.Join(root, lib))
		for _, n := range names {
			if typ, m, ok := strings.Cut(n, "."); ok && methods[m] && (used[lib+"."+typ] || seen[lib]) {
				used[lib+"."+n] = true
			}
		}
	}
	return used
}

// examplePrograms are the example services' packages: what they use is shown to users.
func examplePrograms(root string) []string {
	var dirs []string
	for _, top := range []string{"examples", "cmd/orders", "cmd/notifier", "cmd/demo", "internal/orders"} {
		_ = filepath.WalkDir(filepath.Join(root, top), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				rel, _ := filepath.Rel(root, filepath.Dir(path))
				dirs = append(dirs, rel)
			}
			return nil
		})
	}
	return dirs
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

// documented reports whether the docs name lib.Name (or, for a method, Type.Method or .Method().
func documented(docs, lib, name string) bool {
	want := []string{lib + "." + name}
	if _, method, ok := strings.Cut(name, "."); ok {
		want = append(want, name, "."+method+"(")
	}
	return slices.ContainsFunc(want, func(w string) bool {
		return regexp.MustCompile(`(^|[^A-Za-z0-9_])` + regexp.QuoteMeta(w) + `($|[^A-Za-z0-9_])`).MatchString(docs)
	})
}
