package main

import (
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// commentMaxWords is the most words a sentence of a Go comment may have.
const commentMaxWords = 20

// notProduct are the packages of the product's modules that are not the product.
// The package internal/testenv starts servers for tests, and only tests import it.
var notProduct = []string{"internal/testenv"}

// productModules are the modules whose packages are the product: walbox, and otel (the walbox
// built with tracing). The other modules (test, examples, deploy/helm) are not measured.
var productModules = []string{".", "otel"}

// commentStats counts the comment sentences of one package, and keeps those over the limit.
type commentStats struct {
	proseStats
	tooLong []string // "file:line: n words: sentence"
}

// checkComments measures the sentences of the product's Go comments.
// Each sentence over commentMaxWords words is a problem.
func checkComments(root string, verbose bool, out io.Writer) ([]string, error) {
	pkgs, err := measureComments(root)
	if err != nil {
		return nil, err
	}
	var all proseStats
	var problems []string
	for _, dir := range slices.Sorted(maps.Keys(pkgs)) {
		st := pkgs[dir]
		all = all.add(st.proseStats)
		if verbose {
			fmt.Fprintf(out, "  %s: %.1f words a sentence (%d sentences, %d over %d words)\n",
				dir, st.perSentence(), st.sentences, len(st.tooLong), commentMaxWords)
		}
		for _, s := range st.tooLong {
			problems = append(problems, fmt.Sprintf("%s (a comment sentence has at most %d words)", s, commentMaxWords))
		}
	}
	fmt.Fprintf(out, "Go comments: %.1f words a sentence (%d sentences, %d over %d words) in %d packages\n",
		all.perSentence(), all.sentences, len(problems), commentMaxWords, len(pkgs))
	return problems, nil
}

// measureComments measures the comments of every product package: the non-test Go files of the
// product modules, by package folder.
func measureComments(root string) (map[string]*commentStats, error) {
	pkgs := map[string]*commentStats{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			return walkProductDir(path, rel, d.Name())
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if slices.Contains(notProduct, dir) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		st := pkgs[dir]
		if st == nil {
			st = &commentStats{}
			pkgs[dir] = st
		}
		for _, g := range f.Comments {
			st.measure(fset, rel, g)
		}
		return nil
	})
	return pkgs, err
}

// walkProductDir says whether the walk enters a folder: not testdata, hidden folders, or the
// modules that are not the product.
func walkProductDir(path, rel, name string) error {
	if rel == "." {
		return nil
	}
	if name == "testdata" || strings.HasPrefix(name, ".") {
		return filepath.SkipDir
	}
	if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && !slices.Contains(productModules, rel) {
		return filepath.SkipDir
	}
	return nil
}

// measure counts the sentences of one comment group and keeps those over the limit.
func (st *commentStats) measure(fset *token.FileSet, file string, g *ast.CommentGroup) {
	from := 0 // the comment of g where the search for the next sentence's line starts
	for _, para := range commentParagraphs(g.Text()) {
		for _, s := range sentences(para) {
			st.proseStats = st.proseStats.count(s)
			n := wordCount(s)
			if n <= commentMaxWords {
				continue
			}
			from = sentenceComment(g, s, from)
			line := fset.Position(g.List[from].Pos()).Line
			st.tooLong = append(st.tooLong, fmt.Sprintf("%s:%d: %d words: %s", file, line, n, s))
		}
	}
}

// commentParagraphs returns the prose of a comment's text, parsed as a Go doc comment.
// Each paragraph and list item is one line. Code blocks and headings are left out.
func commentParagraphs(text string) []string {
	var p comment.Parser
	var out []string
	for _, b := range p.Parse(text).Content {
		switch b := b.(type) {
		case *comment.Paragraph:
			out = append(out, plainText(b.Text))
		case *comment.List:
			for _, item := range b.Items {
				for _, c := range item.Content {
					if para, ok := c.(*comment.Paragraph); ok {
						out = append(out, plainText(para.Text))
					}
				}
			}
		}
	}
	return out
}

// plainText is the text of a doc comment's span, on one line: a link counts as its text.
func plainText(text []comment.Text) string {
	var b strings.Builder
	for _, t := range text {
		switch t := t.(type) {
		case comment.Plain:
			b.WriteString(string(t))
		case comment.Italic:
			b.WriteString(string(t))
		case *comment.Link:
			b.WriteString(plainText(t.Text))
		case *comment.DocLink:
			b.WriteString(plainText(t.Text))
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// sentenceComment returns the index of the comment of g that holds the first words of sentence s.
// The search starts at index from, and returns from when no comment holds them.
func sentenceComment(g *ast.CommentGroup, s string, from int) int {
	words := strings.Fields(s)
	for n := min(3, len(words)); n > 0; n-- {
		start := strings.Join(words[:n], " ")
		for i := from; i < len(g.List); i++ {
			if strings.Contains(g.List[i].Text, start) {
				return i
			}
		}
	}
	return from
}
