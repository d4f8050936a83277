package main

import (
	"os"
	"path/filepath"
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
