package main

import (
	"go/parser"
	"go/token"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestMeasureProse(t *testing.T) {
	text := "# A title that is skipped\n\n" +
		"One two three four. Five six `seven eight nine` ten\n" +
		"eleven, wrapped [the link text](http://x/y.z) here.\n\n" +
		"```sh\nfenced code is never counted at all\n```\n" +
		"| a | table row is skipped too |\n" +
		"    an indented block is skipped\n" +
		"- a list item ends its sentence\n" +
		"- Ok.\n\n" +
		"v1.2 is not a sentence end, e.g. this. But this is! (And this.)\n"
	got := measureProse(text)
	// "One two three four." 4; "Five six code ten eleven, wrapped the link text here." 10; the
	// first item 7 (its dash counts); "- Ok." too short; "v1.2 ... e.g. this." 8; "But this is!" 3;
	// "(And this.)" 2, too short.
	want := proseStats{sentences: 5, words: 4 + 10 + 7 + 8 + 3}
	if got != want {
		t.Fatalf("measureProse = %+v, want %+v", got, want)
	}
	long := strings.Repeat("word ", 41) + "end."
	if got := measureProse(long); got.long != 1 {
		t.Fatalf("a sentence of 42 words: %+v, want one long sentence", got)
	}
}

func TestJudgeTracked(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tests := []struct {
		name       string
		data       []byte
		executable bool
		want       string // part of the verdict; "" for none
	}{
		{"script", []byte("#!/bin/sh\necho hi\n"), true, ""},
		{"text", []byte("hello\n"), false, ""},
		{"elf", []byte("\x7fELF\x02\x01\x01rest"), false, "executable binary"},
		{"mach-o", []byte{0xcf, 0xfa, 0xed, 0xfe, 7}, true, "executable binary"},
		{"executable data", []byte("hello\n"), true, "not a script"},
		{"large", make([]byte, maxTrackedBytes+1), false, "more than 2 MB"},
	}
	for _, tt := range tests {
		got := judgeTracked(write(tt.name, tt.data), tt.name, tt.executable)
		if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// The repository as committed passes every check.
func TestRepositoryPasses(t *testing.T) {
	problems, err := run(filepath.Join("..", ".."), false, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// words returns a sentence of n words, ending with a full stop.
func words(n int) string {
	return "Word" + strings.Repeat(" word", n-2) + " end."
}

func TestCommentSentences(t *testing.T) {
	src := "// Package p has a doc comment. " + words(20) + "\n" +
		"//\n" +
		"// A code block is not prose:\n" +
		"//\n" +
		"//\t" + words(30) + "\n" +
		"//\n" +
		"// # A heading of many words is not prose either at all here\n" +
		"//\n" +
		"// A list:\n" +
		"//   - " + words(20) + "\n" +
		"//   - Its `code span with many words` counts as one word: " + words(15) + "\n" +
		"package p\n\n" +
		"// f has a sentence of 21 words. " + words(21) + "\n" +
		"// Then it goes on.\n" +
		"func f() {\n" +
		"\tx := 1 // Ok.\n" +
		"\t_ = x\n" +
		"}\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var st commentStats
	for _, g := range f.Comments {
		st.measure(fset, "p.go", g)
	}
	// "Package p has a doc comment." 6, then 20; "A code block is not prose:" 6; "A list:" too
	// short; the items 20 and 6+15; "f has a sentence of 21 words." 7, then 21; "Then it goes on."
	// 4; "Ok." too short.
	want := proseStats{sentences: 8, words: 6 + 20 + 6 + 20 + 21 + 7 + 21 + 4}
	if st.proseStats != want {
		t.Errorf("stats = %+v, want %+v", st.proseStats, want)
	}
	if len(st.tooLong) != 2 ||
		!strings.HasPrefix(st.tooLong[0], "p.go:11: 21 words: Its code counts") ||
		!strings.HasPrefix(st.tooLong[1], "p.go:14: 21 words: Word word") {
		t.Errorf("too long: %q, want the second item (line 11) and the 21 words (line 14)", st.tooLong)
	}
}

func TestMeasureCommentsReadsTheProductOnly(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	long := "// " + words(25) + "\npackage p\n"
	write("go.mod", "module m\n")
	write("lib/lib.go", "// Package lib is short and sweet.\npackage lib\n")
	write("lib/lib_test.go", long)
	write("lib/testdata/x.go", long)
	write("internal/testenv/env.go", long)
	write("test/go.mod", "module t\n")
	write("test/t.go", long)
	write("otel/go.mod", "module o\n")
	write("otel/tracing/t.go", long)
	write("newlib/n.go", long)
	pkgs, err := measureComments(root)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(pkgs)); !slices.Equal(got, []string{"lib", "newlib", "otel/tracing"}) {
		t.Fatalf("packages %q, want lib, newlib and otel/tracing", got)
	}
	if st := pkgs["lib"]; st.sentences != 1 || len(st.tooLong) != 0 {
		t.Errorf("lib: %+v, want one short sentence", st)
	}
	if st := pkgs["otel/tracing"]; len(st.tooLong) != 1 {
		t.Errorf("otel/tracing: %+v, want one long sentence", st)
	}
	// Every product package is checked, one no list names too.
	problems, err := checkComments(root, false, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 2 || !strings.HasPrefix(problems[0], "newlib/n.go:1: 25 words") ||
		!strings.HasPrefix(problems[1], "otel/tracing/t.go:1: 25 words") {
		t.Errorf("problems %q, want the long sentences of newlib and otel/tracing", problems)
	}
}
